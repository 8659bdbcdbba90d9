"""Your own model: built from a registered name, a 'module:Class' path or an instance,
checked against the algorithm's contract when the policy is built."""

from __future__ import annotations

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
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
