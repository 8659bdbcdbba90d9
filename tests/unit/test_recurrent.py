"""Recurrent policies: the sequence losses (PPO's, IMPALA's and APPO's V-trace unroll) against
a step-by-step hand computation, the shapes of what device mode trains on, and the refusals of
what is not supported yet."""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow.algorithms import appo, impala, ppo
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.config import ConfigError, make_config
from jaxflow.policies import actor_critic_policy
from jaxflow.policies.sequences import sequence_batch

T, B, OBS, A = 6, 3, 2, 2
RESET = (3, 0)
"""(step, sequence) where an episode starts inside the sequence."""
CONFIG = make_config(
    PPOConfig, env="jaxflow/StatelessCartPole-v1", use_lstm=True, lstm_size=8, hidden_sizes=(16,), clip_eps=0.2
)
POLICY = actor_critic_policy(CONFIG, gymnasium.spaces.Box(-1.0, 1.0, (OBS,), np.float32), gymnasium.spaces.Discrete(A))


def fragment(seed: int = 0) -> dict:
    """A time-major fragment with a random start state and one reset at ``RESET``."""
    rng = np.random.default_rng(seed)
    starts = np.zeros((T, B), bool)
    starts[RESET] = True
    state = tuple(jnp.asarray(rng.normal(size=(B, CONFIG.lstm_size)), jnp.float32) for _ in range(2))
    return {
        "obs": jnp.asarray(rng.normal(size=(T, B, OBS)), jnp.float32),
        "actions": jnp.asarray(rng.integers(0, A, (T, B)), jnp.int32),
        "logp": jnp.asarray(np.log(rng.uniform(0.3, 0.7, (T, B))), jnp.float32),
        "values": jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
        "advantages": jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
        "value_targets": jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
        "episode_starts": jnp.asarray(starts),
        "policy_state": state,
    }


def hand_outputs(params, traj, last_obs=None):
    """Logits ``[T, B, A]`` and values ``[T, B]`` (``[T + 1, B]`` with ``last_obs``: the value
    after the sequence, from the state it reached), the network applied one observation at a
    time, its state set to zeros by hand where an episode starts."""
    logits, values = np.zeros((T, B, A)), np.zeros((T + (last_obs is not None), B))
    apply = jax.jit(POLICY.network.apply)
    for b in range(B):
        state = tuple(s[b : b + 1] for s in traj["policy_state"])
        for t in range(T):
            if traj["episode_starts"][t, b]:
                state = tuple(jnp.zeros_like(s) for s in state)
            state, (inputs, value) = apply(params, state, traj["obs"][t, b][None])
            logits[t, b], values[t, b] = np.asarray(inputs[0]), float(value[0])
        if last_obs is not None:
            values[T, b] = float(apply(params, state, last_obs[b][None])[1][1][0])
    return logits, values


def log_softmax(logits):
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def hand_loss(params, traj) -> dict:
    """PPO's loss in numpy on :func:`hand_outputs`."""
    logits, values = hand_outputs(params, traj)
    log_probs = log_softmax(logits)
    logp = np.take_along_axis(log_probs, np.asarray(traj["actions"])[..., None], -1)[..., 0]
    ratio = np.exp(logp - np.asarray(traj["logp"]))
    adv = np.asarray(traj["advantages"])
    policy_loss = -np.mean(np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv))
    value_loss = 0.5 * np.mean((values - np.asarray(traj["value_targets"])) ** 2)
    entropy = np.mean(-(np.exp(log_probs) * log_probs).sum(-1))
    total = policy_loss + CONFIG.vf_coef * value_loss - CONFIG.ent_coef * entropy
    return {"total": total, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


@pytest.mark.parametrize("jit", [True, False])
def test_sequence_loss_with_a_reset_inside_equals_the_step_by_step_hand_computation(jit):
    params = POLICY.init(jax.random.PRNGKey(1))
    traj = fragment()
    loss = lambda p, batch: ppo.loss(p, batch, jax.random.PRNGKey(0), policy=POLICY, config=CONFIG)  # noqa: E731
    if jit:
        total, metrics = jax.jit(loss)(params, sequence_batch(traj))
    else:
        with jax.disable_jit():
            total, metrics = loss(params, sequence_batch(traj))
    want = hand_loss(params, traj)
    np.testing.assert_allclose(float(total), want["total"], rtol=1e-5, atol=1e-6)
    for k in ("policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(float(metrics[k]), want[k], rtol=1e-5, atol=1e-6)
    # The reset matters: without it the sequence's later steps read the carried state.
    no_reset = dict(traj, episode_starts=jnp.zeros((T, B), bool))
    assert abs(hand_loss(params, no_reset)["value_loss"] - want["value_loss"]) > 1e-4


def test_vtrace_losses_unroll_from_the_stored_state_with_the_reset_inside():
    """IMPALA's and APPO's losses read a batch-major fragment: the recurrent policy unrolled
    from each sequence's stored state, reset where an episode starts, gives the step-by-step
    log-probabilities, entropies and values, and the value after the sequence from the state
    it reached; both losses are finite on it and their value loss moves with the reset."""
    params = POLICY.init(jax.random.PRNGKey(1))
    traj = fragment()
    last_obs = jnp.asarray(np.random.default_rng(1).normal(size=(B, OBS)), jnp.float32)
    rewards = jnp.asarray(np.random.default_rng(2).normal(size=(T, B)), jnp.float32)
    keep = ("obs", "actions", "logp", "episode_starts", "policy_state")
    raw = dict({k: traj[k] for k in keep}, rewards=rewards, discounts=jnp.full((T, B), 0.9), last_obs=last_obs)
    batch = impala.batch_major(raw)
    logp, entropy, values = jax.jit(functools.partial(impala.evaluate_sequences, policy=POLICY))(params, batch)
    logits, want_values = hand_outputs(params, traj, np.asarray(last_obs))
    log_probs = log_softmax(logits)
    want_logp = np.take_along_axis(log_probs, np.asarray(traj["actions"])[..., None], -1)[..., 0]
    np.testing.assert_allclose(logp, want_logp, atol=1e-5)
    np.testing.assert_allclose(entropy, -(np.exp(log_probs) * log_probs).sum(-1), atol=1e-5)
    np.testing.assert_allclose(values, want_values, atol=1e-5)
    config = make_config(
        appo.APPOConfig, use_lstm=True, lstm_size=8, hidden_sizes=(16,), train_batch_size=T * B, minibatch_sequences=1
    )
    no_reset = impala.batch_major(dict(raw, episode_starts=jnp.zeros((T, B), bool)))
    for loss in (impala.loss, appo.loss):
        run = jax.jit(lambda p, b, loss=loss: loss(p, b, jax.random.PRNGKey(0), policy=POLICY, config=config))
        (total, metrics), (_, without) = run(params, batch), run(params, no_reset)
        assert np.isfinite(float(total)) and abs(float(metrics["value_loss"]) - float(without["value_loss"])) > 1e-4


def test_device_mode_trains_on_whole_sequences_whose_stored_state_reproduces_the_actions():
    """The train batch's leading axis is the env (sequence), a minibatch holds
    minibatch_size // rollout_fragment_length of them, and unrolling the policy over each
    sequence from its stored start state, reset where episodes start, gives the sampled
    log-probabilities and values again (three fragments: the state crosses fragments)."""
    from jaxflow import Algorithm
    from jaxflow.ondevice.rollout import rollout
    from jaxflow.policies.sequences import policy_outputs

    steps = 64
    algo = Algorithm.build(
        "PPO", env="jaxflow/StatelessCartPole-v1", use_lstm=True, lstm_size=8, num_envs=4,
        rollout_fragment_length=steps, minibatch_size=128, iterations_per_call=1,
    )  # fmt: skip
    program = algo.program
    assert ppo.sgd_settings(algo.config) == (algo.config.num_epochs, 2)
    state = jax.tree.map(lambda x: x[0], program.state)
    params, carry, resets = state.train.params, state.envs, 0
    act = jax.jit(functools.partial(rollout, program.env, program.env_params, program.policy, None, program.config),
                  static_argnums=4)  # fmt: skip
    for i in range(3):
        carry, traj, _ = act(params, carry, jax.random.PRNGKey(i), jnp.float32(0), steps)
        batch = ppo.device_batch(program.spec.postprocess(traj, algo.config), algo.config)
        assert batch["obs"].shape == (4, steps, OBS) and [s.shape for s in batch["policy_state"]] == [(4, 8)] * 2
        inputs, values, flat = policy_outputs(program.policy, params, batch)
        logp = program.policy.distribution.log_prob(inputs, flat["actions"])
        np.testing.assert_allclose(logp, flat["logp"], atol=1e-5)
        np.testing.assert_allclose(values, flat["values"], atol=1e-5)
        resets += int(batch["episode_starts"][:, 1:].sum())
    assert resets > 0  # episodes started inside the sequences


@pytest.mark.parametrize(
    "algo, settings, match",
    [
        (
            "DQN",
            {},
            r"DQN has no recurrent policy yet; use_lstm is supported by PPO \(device and Ray mode\), A2C, IMPALA and APPO \(Ray mode\), and R2D2 \(device and Ray mode\)",
        ),
        ("SAC", {}, "SAC has no recurrent policy yet"),
        ("DDPPO", {}, "DDPPO has no recurrent policy yet"),
        ("A2C", {"mode": "device"}, "trains in ray mode only so far, not mode='device'"),
        ("PPO", {"num_learners": 2}, "trains with one learner so far, not num_learners=2"),
        ("R2D2", {"model": "x:Y"}, "R2D2's recurrent Q-network takes no custom model yet"),
        ("PPO", {"minibatch_size": 16, "rollout_fragment_length": 32}, "must be >= rollout_fragment_length"),
    ],
)
def test_unsupported_recurrent_settings_are_refused_in_one_line(algo, settings, match):
    from jaxflow.api.registry import get_algorithm

    with pytest.raises(ConfigError, match=match):
        make_config(get_algorithm(algo).config_cls, use_lstm=True, **settings)


def test_a_recurrent_run_in_a_mode_without_it_is_refused_before_anything_starts():
    from jaxflow.algorithms.a2c import A2CConfig
    from jaxflow.algorithms.multiagent import MultiAgentConfig
    from jaxflow.api.program import resolve_mode
    from jaxflow.api.registry import get_algorithm

    config = make_config(A2CConfig, env="jaxflow/StatelessCartPole-v1", use_lstm=True)  # "auto": device mode
    with pytest.raises(
        ConfigError,
        match="A2C's recurrent policies train in ray mode only so far, and .* runs in device mode \\(set mode='ray'\\)",
    ):
        resolve_mode(config, get_algorithm("A2C"))
    assert resolve_mode(make_config(PPOConfig, env="CartPole-v1", use_lstm=True), get_algorithm("PPO")) == "ray"
    policies = {"p": {"algorithm": "PPO", "config": {"use_lstm": True}}}
    with pytest.raises(ConfigError, match=r"policies\['p'\]: use_lstm=True is not supported in multi-agent runs"):
        make_config(
            MultiAgentConfig,
            env="multiagent/Rendezvous-v0",
            policies=policies,
            mapping={"agent_0": "p", "agent_1": "p"},
        )


def test_checkpoint_resume_and_evaluate_carry_the_recurrent_state(tmp_path):
    """A saved run restores with each env's recurrent state and start flags as they were,
    and `jaxflow evaluate`'s host evaluation plays the loaded recurrent policy."""
    from jaxflow import Algorithm
    from jaxflow.api.algorithm import load_policy
    from jaxflow.rollout.evaluation import evaluate_policy

    algo = Algorithm.build(
        "PPO", env="jaxflow/StatelessCartPole-v1", use_lstm=True, lstm_size=8, num_envs=4,
        rollout_fragment_length=16, minibatch_size=32, iterations_per_call=1,
    )  # fmt: skip
    algo.train()
    path = algo.save(str(tmp_path))
    restored = Algorithm.restore(path)
    before, after = algo.program.state.envs, restored.program.state.envs
    for a, b in zip(jax.tree.leaves((before.policy_state, before.episode_start)), jax.tree.leaves((after.policy_state, after.episode_start)), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(jnp.abs(before.policy_state[1]).sum()) > 0  # a state that is not the initial zeros
    config, policy, params, normalizer = load_policy(path)
    out = evaluate_policy(config, policy, params, 2, 0, normalizer)
    assert policy.recurrent and out["episodes"] == 2 and min(out["lengths"]) >= 1
