"""Box actions end to end: what a worker (or device mode) stores is the Gaussian's own
unclipped sample, what the environment gets is that sample clipped and rescaled to the
Box's bounds (read back from Pendulum's reward), and Box policies save, restore and evaluate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from traces import traced

from jaxflow import Algorithm, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config
from jaxflow.ondevice.rollout import EnvCarry, rollout
from jaxflow.policies import Gaussian

PPO = get_algorithm("PPO")
T, B = 32, 4


def pendulum_torque_squared(obs: np.ndarray, reward: np.ndarray) -> np.ndarray:
    """``u^2`` of the torque Pendulum applied, from its reward
    ``-(angle^2 + 0.1 * angular_velocity^2 + 0.001 * u^2)`` at the step's starting state."""
    angle = np.arctan2(obs[..., 1], obs[..., 0])
    return (-reward - angle**2 - 0.1 * obs[..., 2] ** 2) / 0.001


def check_fragment(policy, params, obs, actions, logp, rewards) -> None:
    obs, actions = np.asarray(obs, np.float64), np.asarray(actions)
    assert actions.shape == (T, B, 1) and actions.dtype == np.float32
    assert (np.abs(actions) > 1).mean() > 0.1  # stored unclipped: std 1 at initialisation
    expected = (2.0 * np.clip(actions[..., 0], -1, 1)) ** 2  # [-1, 1] onto Pendulum's [-2, 2]
    np.testing.assert_allclose(pendulum_torque_squared(obs, np.asarray(rewards, np.float64)), expected, atol=0.05)
    inputs, _ = policy.apply(params, jnp.asarray(obs.reshape(T * B, 3), jnp.float32))
    ref = policy.distribution.log_prob(inputs, jnp.asarray(actions.reshape(T * B, 1)))
    np.testing.assert_allclose(np.asarray(logp).reshape(-1), ref, rtol=1e-5, atol=1e-5)


def test_a_worker_stores_the_sample_and_steps_the_env_with_it_rescaled():
    config = make_config(
        PPO.config_cls, env="Pendulum-v1", num_workers=1, num_envs_per_worker=B, rollout_fragment_length=T
    )
    env = envs.make_cpu("Pendulum-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    assert isinstance(policy.distribution, Gaussian)
    params = policy.init(jax.random.PRNGKey(0))
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(params, 0)
    d = worker.sample().data
    worker.close()
    check_fragment(policy, params, d["obs"], d["actions"], d["logp"], d["rewards"])


def test_device_mode_steps_gymnax_with_the_rescaled_sample():
    config = make_config(PPO.config_cls, env="gymnax/Pendulum-v1", rollout_fragment_length=T)
    genv, gparams = envs.make("gymnax/Pendulum-v1")
    env = envs.make_cpu("gymnax/Pendulum-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    params = policy.init(jax.random.PRNGKey(0))
    obs0, state = jax.vmap(genv.reset_env, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), B), gparams)
    carry = EnvCarry(state, obs0, jnp.zeros(B), jnp.zeros(B, jnp.int32))
    _, traj, _ = rollout(genv, gparams, policy, None, config, params, carry, jax.random.PRNGKey(2), jnp.float32(0), T)
    check_fragment(policy, params, traj["obs"], traj["actions"], traj["logp"], traj["rewards"])


SMALL_PPO = dict(train_batch_size=256, minibatch_size=128)
"""A quarter of PPO's batch (1,024): one iteration still trains on Box actions and moves the policy,
all the save/restore test asks of it."""


def test_a_box_policy_trains_saves_restores_and_evaluates(ray_local, tmp_path):
    algo = Algorithm.build("PPO", env="Pendulum-v1", num_workers=1, seed=0, **SMALL_PPO)
    try:
        result = algo.train()
        algo.save(str(tmp_path))
        before = algo.evaluate(episodes=2, seed=3)
    finally:
        algo.stop()
    assert np.isfinite(result["learner"]["loss"]) and result["env_steps_trained"] > 0
    restored = Algorithm.restore(str(tmp_path), num_workers=0)  # evaluate() plays in this process: no worker to start
    try:
        after = restored.evaluate(episodes=2, seed=3)
    finally:
        restored.stop()
    # The greedy (mean) action of the same parameters on the same seeds: the same returns.
    assert after["returns"] == before["returns"] and -2000 < before["return_mean"] < 0


def test_impala_learns_from_box_actions_through_v_trace(ray_local):
    algo = Algorithm.build("IMPALA", env="Pendulum-v1", num_workers=1, seed=0)
    try:
        result = algo.train()
    finally:
        algo.stop()
    # One sequence of Gaussian log-probs per fragment: behaviour and target policies agree at the start.
    assert np.isfinite(result["learner"]["loss"]) and 0.5 < result["learner"]["mean_rho"] < 2.0


@pytest.mark.parametrize("name", ["SAC", "TD3"])
def test_on_the_device_the_target_moves_by_polyak_averaging_and_a_resume_is_bit_exact(tmp_path, name):
    small = dict(
        env="gymnax/Pendulum-v1",
        num_envs=4,
        iterations_per_call=2,
        learning_starts=64,
        train_batch_size=32,
        samples_per_insert=8.0,  # 8 SGD steps an iteration (not 32): enough to move the critics and the targets
        hidden_sizes=(32, 32),
        min_env_steps_per_iteration=0,
        seed=0,
    )
    algo = Algorithm.build(name, **small)
    assert algo.mode == "device"
    algo.train()
    with traced() as names:  # gymnax's Pendulum resets a weakly typed leaf, which the state must not keep
        algo.train()
        algo.save(str(tmp_path))
        for _ in range(2):
            result = algo.train()
    assert "_run_members" not in names  # the program compiled once, for every call
    assert np.isfinite(result["learner"]["critic_loss"]) and result["env_steps_trained"] > 0
    assert name != "SAC" or 0 < result["learner"]["alpha"] < 1
    train_state = jax.device_get(algo.program.state.train)
    # Polyak averaging: the target critics moved, but are not a copy of the parameters.
    q, target_q = train_state.params["params"]["q"], train_state.target_params["params"]["q"]
    gaps = [float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(q), jax.tree.leaves(target_q), strict=True)]
    assert all(g > 0 for g in gaps)
    expected = algo.program.get_state()
    algo.stop()

    restored = Algorithm.restore(str(tmp_path))
    for _ in range(2):
        restored.train()
    got = restored.program.get_state()
    restored.stop()
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(expected), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))


def test_mujoco_half_cheetah_trains_with_sac_on_ray_workers(ray_local):
    # Half an iteration to fill the replay buffer, the other half trained on: MuJoCo's env on a
    # worker and SAC's update on its 6-dimensional actions, each met at least once.
    small = dict(learning_starts=128, train_batch_size=64, samples_per_insert=64.0, hidden_sizes=(32, 32))
    algo = Algorithm.build("SAC", env="HalfCheetah-v5", num_workers=1, min_env_steps_per_iteration=256, **small)
    try:
        assert algo.policy.distribution.action_shape == (6,)
        result = algo.train()
    finally:
        algo.stop()
    assert np.isfinite(result["learner"]["loss"]) and result["env_steps_trained"] > 0
