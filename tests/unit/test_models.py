"""Your own model: built from a registered name, a 'module:Class' path or an instance,
checked against the algorithm's contract when the policy is built."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import ConfigError, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config, register_model
from jaxflow.networks import build_model, describe_module
from jaxflow.rollout import PolicyOutputError

OBS = gymnasium.spaces.Box(-1.0, 1.0, (4,))
PPO, DQN = get_algorithm("PPO"), get_algorithm("DQN")


class TwoHeads(nn.Module):
    """An actor-critic of the test's own: GELU layers, one torso for both heads."""

    num_outputs: int
    width: int = 16

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = nn.gelu(nn.Dense(self.width)(obs))
        return nn.Dense(self.num_outputs)(h), nn.Dense(1)(h)[..., 0]


class ValueOnly(nn.Module):
    """Wrong for an actor-critic: returns the value alone."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(1)(obs)[..., 0]


def ppo_policy(action_space, **fields):
    return PPO.policy(make_config(PPO.config_cls, env="CartPole-v1", **fields), OBS, action_space)


def test_an_instance_a_class_path_and_a_registered_name_build_the_same_module():
    path, kwargs = describe_module(TwoHeads(num_outputs=2, width=8))
    assert path == f"{__name__}:TwoHeads" and kwargs == {"num_outputs": 2, "width": 8}
    register_model("two-heads", lambda num_outputs, width: TwoHeads(num_outputs, width))
    for name, config in [(path, kwargs), ("two-heads", {"width": 8})]:
        module = build_model(name, config, num_outputs=2)
        assert isinstance(module, TwoHeads) and (module.num_outputs, module.width) == (2, 8)
    policy = ppo_policy(gymnasium.spaces.Discrete(2), model="two-heads", model_config={"width": 8})
    params = policy.init(jax.random.PRNGKey(0))
    assert params["params"]["Dense_0"]["kernel"].shape == (4, 8)
    inputs, value = policy.apply(params, jnp.ones((3, 4)))
    assert inputs.shape == (3, 2) and value.shape == (3,)


def test_a_model_with_the_wrong_outputs_fails_at_build_naming_the_expected_shapes():
    register_model("value-only", lambda num_outputs: ValueOnly())
    with pytest.raises(
        ConfigError, match=r"Model 'value-only' returns shapes \(2,\) .* expected .*\(\(2, 2\), \(2,\)\)"
    ):
        ppo_policy(gymnasium.spaces.Discrete(2), model="value-only")
    # A Box needs means and log-stds: 2 x 3 inputs, not 3.
    register_model("three", lambda num_outputs: TwoHeads(3))
    with pytest.raises(ConfigError, match=r"expected \(distribution inputs, value\) .*\(\(2, 6\), \(2,\)\)"):
        ppo_policy(gymnasium.spaces.Box(-1.0, 1.0, (3,)), model="three")


def test_a_custom_q_network_is_checked_against_q_values_per_action():
    register_model("q-two-heads", lambda num_outputs: TwoHeads(num_outputs))
    config = make_config(DQN.config_cls, env="CartPole-v1", model="q-two-heads")
    with pytest.raises(ConfigError, match=r"expected Q-values for CartPole-v1: \(2, 2\)"):
        DQN.policy(config, OBS, gymnasium.spaces.Discrete(2))


def test_unknown_and_unimportable_models_are_one_clear_line():
    with pytest.raises(ConfigError, match="Unknown model 'nope'.*Registered:"):
        build_model("nope", {}, 2)
    with pytest.raises(ConfigError, match="Model 'no_such_package:Net' cannot be imported"):
        build_model("no_such_package:Net", {}, 2)
    with pytest.raises(ConfigError, match="take no custom model yet"):
        sac = get_algorithm("SAC")
        sac.policy(make_config(sac.config_cls, model="two-heads"), OBS, gymnasium.spaces.Box(-1.0, 1.0, (1,)))


def test_a_custom_model_trains_in_device_mode():
    from jaxflow import Algorithm

    algo = Algorithm.build("PPO", env="gymnax/CartPole-v1", model=TwoHeads(2, 8), num_envs=8, iterations_per_call=1)
    try:
        assert algo.mode == "device" and isinstance(algo.program.policy.network, TwoHeads)
        result = algo.train()
    finally:
        algo.stop()
    assert result["env_steps_trained"] > 0 and jnp.isfinite(result["learner"]["loss"])


class NaNAfterReset(nn.Module):
    """Finite at initialisation, NaN logits for observations whose first entry is negative."""

    num_outputs: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = nn.Dense(self.num_outputs)(obs)
        return jnp.where(obs[:, :1] < 0, jnp.nan, logits), nn.Dense(1)(obs)[..., 0]


def test_nan_outputs_of_a_model_stop_the_worker_on_that_step_naming_the_model():
    register_model("nan-sometimes", lambda num_outputs: NaNAfterReset(num_outputs))
    config = make_config(PPO.config_cls, env="Pendulum-v1", model="nan-sometimes", num_envs_per_worker=2)
    env = envs.make_cpu("Pendulum-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    worker = RolloutWorker(WorkerSpec(config, policy), index=3)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    try:
        with pytest.raises(
            PolicyOutputError,
            match=r"rollout worker 3: the policy \(model 'nan-sometimes'\) gave NaN or infinite outputs for [12] of 2 "
            r"observations of 'Pendulum-v1' at the worker's env step \d+",
        ):
            for _ in range(20):  # Pendulum's cos(angle) goes negative within a few steps of some start
                worker.sample()
    finally:
        worker.close()


GRU = "user_models:GRUActorCritic"


def test_a_recurrent_model_is_checked_against_its_carry_and_outputs():
    """With use_lstm=True a model is recurrent: a GRU whose carry is one array builds a
    recurrent policy; a carry that comes back wider, a model without initial_carry, and a
    recurrent model without use_lstm are each refused in one line naming the model."""
    policy = ppo_policy(gymnasium.spaces.Discrete(2), model=GRU, model_config={"num_outputs": 2}, use_lstm=True)
    params = policy.init(jax.random.PRNGKey(0))
    state, inputs, value = policy.step(params, policy.initial_state(3), jnp.ones((3, 4)), jnp.ones(3, bool))
    assert policy.recurrent and state.shape == (3, 8) and inputs.shape == (3, 2) and value.shape == (3,)
    refusals = [
        ("user_models:GrowingCarry", True, r"takes the carry float32\[2, 8\] \(initial_carry\(2\)\) and returns "
         r"float32\[2, 9\]; expected the same structure, shapes and dtypes"),
        (f"{__name__}:TwoHeads", True, r"has no initial_carry\(batch_size\): with use_lstm=True a model is recurrent"),
        (GRU, False, r"fails on observations .* \(it has initial_carry: a recurrent model trains with use_lstm=True\)"),
    ]  # fmt: skip
    for model, use_lstm, match in refusals:
        with pytest.raises(ConfigError, match=f"^Model {model!r} {match}") as e:
            ppo_policy(gymnasium.spaces.Discrete(2), model=model, model_config={"num_outputs": 2}, use_lstm=use_lstm)
        assert "\n" not in str(e.value)


def test_lstm_size_beside_a_model_is_refused_in_one_line_and_older_checkpoints_configs_still_load():
    """The model decides its own core: ``lstm_size`` set with it (even to the default's 64) is
    refused when the config is made, before anything is built; a config saved by an older
    jaxflow, which held the unused 64 beside every model, loads with lstm_size unset."""
    from jaxflow import Algorithm
    from jaxflow.config import from_json_dict, to_json_dict

    for algorithm, size in [("PPO", 32), ("APPO", 64)]:
        with pytest.raises(ConfigError, match=rf"^{algorithm}Config.lstm_size={size} with model={GRU!r}: the model "
                           "decides its own recurrent core") as e:  # fmt: skip
            Algorithm.build(algorithm, model=GRU, model_config={"num_outputs": 2}, use_lstm=True, lstm_size=size)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="lstm_size=8 with model='user_models:GRUActorCritic'"):
        make_config(PPO.config_cls, model=GRU, use_lstm=False, lstm_size=8)
    config = make_config(PPO.config_cls, model=GRU, use_lstm=True)
    assert config.lstm_size is None and make_config(PPO.config_cls, use_lstm=True).lstm_units == 64
    older = dict(to_json_dict(config), lstm_size=64)
    assert from_json_dict(PPO.config_cls, older) == config == from_json_dict(PPO.config_cls, to_json_dict(config))
    with pytest.raises(ConfigError, match="lstm_size=32 with model="):
        from_json_dict(PPO.config_cls, dict(older, lstm_size=32))


class OnesCarry(nn.Module):
    """A carry whose new episodes start from ones, not zeros."""

    def initial_carry(self, batch_size: int) -> jax.Array:
        return jnp.ones((batch_size, 2), jnp.float32)


def test_a_reset_returns_a_row_to_the_models_initial_carry():
    policy = PPO.policy(make_config(PPO.config_cls, env="CartPole-v1"), OBS, gymnasium.spaces.Discrete(2))
    policy = dataclasses.replace(policy, network=OnesCarry(), recurrent=True)
    state = policy.reset_state(jnp.full((3, 2), 5.0), jnp.array([False, True, False]))
    np.testing.assert_array_equal(state, [[5.0, 5.0], [1.0, 1.0], [5.0, 5.0]])


def test_a_users_gru_trains_ppo_in_device_mode_and_restores_with_its_state(tmp_path):
    """One compiled call of device-mode PPO with the GRU; the checkpoint restores the same
    parameters and each env's carry, and compute_actions carries the GRU's state: two greedy
    steps from it equal the policy's own greedy_step from the initial carry."""
    from jaxflow import Algorithm

    algo = Algorithm.build(
        "PPO", env="jaxflow/StatelessCartPole-v1", model=GRU, model_config={"num_outputs": 2}, use_lstm=True,
        num_envs=4, rollout_fragment_length=16, minibatch_size=32, iterations_per_call=1,
    )  # fmt: skip
    try:
        result = algo.train()
        path = algo.save(str(tmp_path))
        before = jax.device_get((algo.program.state.train.params, algo.program.state.envs.policy_state))
    finally:
        algo.stop()
    assert algo.mode == "device" and jnp.isfinite(result["learner"]["loss"]) and np.abs(before[1]).sum() > 0
    restored = Algorithm.restore(path)
    try:
        after = jax.device_get((restored.program.state.train.params, restored.program.state.envs.policy_state))
        assert jax.tree.structure(after) == jax.tree.structure(before)
        for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True):
            np.testing.assert_array_equal(a, b)
        policy, params = restored.policy, jax.tree.map(lambda x: x[0], after[0])
        obs = np.array([[0.1, -0.2], [0.0, 0.05]], np.float32)
        actions, state = restored.compute_actions(obs)
        again, state = restored.compute_actions(obs[::-1], state=state)
        want_state, want = policy.greedy_step(params, policy.initial_state(2), jnp.asarray(obs))
        want_state, want_again = policy.greedy_step(params, want_state, jnp.asarray(obs[::-1]))
        assert state.shape == (2, 8) and actions.tolist() == want.tolist() and again.tolist() == want_again.tolist()
        np.testing.assert_allclose(state, want_state, atol=1e-6)
    finally:
        restored.stop()
