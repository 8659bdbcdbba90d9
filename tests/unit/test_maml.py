"""MAML: the meta-gradient through the inner step against finite differences, the inner
step by hand, the task distributions' dynamics, config validation, device and Ray mode
end to end, and checkpoint round trips."""

from __future__ import annotations

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import Algorithm, ConfigError, make_config
from jaxflow.algorithms.maml import (
    MAMLConfig,
    adapt,
    inner_loss,
    meta_loss,
    pg_advantages,
    reward_to_go,
    rollout_episodes,
)
from jaxflow.envs.tasks import PointParams, list_task_distributions, make_task_distribution
from jaxflow.networks.mlp import MLPActorCritic

POINT = "tasks/PointNavigation-v0"
CARTPOLE = "tasks/CartPoleLengths-v0"
TINY = dict(meta_batch_size=2, episodes_per_task=2, hidden_sizes=(8,), iterations_per_call=1, seed=3)


def _tiny_problem(
    key: jax.Array,
    dtype: jnp.dtype = jnp.float32,
    num_tasks: int = 2,
    T: int = 3,
    B: int = 2,
    obs_dim: int = 2,
    A: int = 3,
):
    """A one-layer policy and fixed random pre/post batches ``[N, T, B]``."""
    net = MLPActorCritic(A, hidden_sizes=(4,))
    k_init, k_obs, _, k_adv = jax.random.split(key, 4)
    params = jax.tree.map(lambda x: x.astype(dtype), net.init(k_init, jnp.zeros((1, obs_dim))))
    # Policy logits large enough that the inner step moves the policy noticeably.
    params["params"]["Dense_1"]["kernel"] = params["params"]["Dense_1"]["kernel"] * 100.0

    def batch(k):
        ko, ka, kd = jax.random.split(k, 3)
        mask = jnp.ones((num_tasks, T, B)).at[:, -1, 0].set(0.0)  # one episode ended a step early
        return dict(
            obs=jax.random.normal(ko, (num_tasks, T, B, obs_dim), dtype),
            actions=jax.random.randint(ka, (num_tasks, T, B), 0, A),
            advantages=jax.random.normal(kd, (num_tasks, T, B), dtype) * mask,
            mask=mask,
        )

    return net, params, batch(k_obs), batch(k_adv)


def test_meta_gradient_matches_central_finite_differences():
    """d/dtheta of the post-adaptation loss at theta - alpha grad L_pre(theta), every
    parameter, float64: analytic (through the inner step) vs central differences."""
    with jax.enable_x64(True):
        net, params, pre, post = _tiny_problem(jax.random.PRNGKey(0), jnp.float64)
        f = jax.jit(lambda p: meta_loss(p, pre, post, 0.5, net.apply, 2)[0])
        grad = jax.jit(jax.grad(f))(params)
        flat, unravel = jax.flatten_util.ravel_pytree(params)
        eps = 1e-6
        fd = np.array(
            [(f(unravel(flat.at[i].add(eps))) - f(unravel(flat.at[i].add(-eps)))) / (2 * eps) for i in range(flat.size)]
        )
        analytic = np.asarray(jax.flatten_util.ravel_pytree(grad)[0])
        assert np.abs(analytic).max() > 1e-2
        np.testing.assert_allclose(analytic, fd, atol=1e-3 * np.abs(fd).max(), rtol=1e-3)
        # The inner step's second-order term matters here: first-order MAML differs.
        first_order = jax.jit(
            jax.vmap(
                lambda b_pre, b_post: jax.grad(inner_loss)(adapt(params, b_pre, 0.5, net.apply, 2), b_post, net.apply)
            )
        )(pre, post)
        fo = np.asarray(jax.flatten_util.ravel_pytree(jax.tree.map(lambda g: g.mean(0), first_order))[0])
        assert np.abs(fo - analytic).max() > 1e-2 * np.abs(analytic).max()


def test_adapt_is_plain_sgd_on_the_inner_loss():
    net, params, pre, _ = _tiny_problem(jax.random.PRNGKey(1))
    task0 = jax.tree.map(lambda x: x[0], pre)
    grad = jax.jit(jax.grad(functools.partial(inner_loss, apply_fn=net.apply)))
    g = grad(params, task0)
    by_hand = jax.tree.map(lambda p, d: p - 0.1 * d, params, g)
    got = jax.jit(functools.partial(adapt, inner_lr=0.1, apply_fn=net.apply, inner_steps=1))(params, task0)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(by_hand)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    twice = jax.tree.map(lambda p, d: p - 0.1 * d, by_hand, grad(by_hand, task0))
    adapt_twice = jax.jit(functools.partial(adapt, inner_lr=0.1, apply_fn=net.apply, inner_steps=2))
    for a, b in zip(jax.tree.leaves(adapt_twice(params, task0)), jax.tree.leaves(twice)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_inner_loss_and_advantages_by_hand():
    """Rewards 1, 1, 1 with gamma 0.5: reward-to-go 1.75, 1.5, 1, cut where the mask ends.
    Two episodes: each one's baseline is the other's reward-to-go (leave-one-out)."""
    r = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    mask = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    g = reward_to_go(r, mask, 0.5)
    np.testing.assert_allclose(g, [[1.75, 1.5], [1.5, 1.0], [1.0, 0.0]])
    raw = np.array([[0.25, -0.25], [0.5, -0.5], [1.0, 0.0]])  # G - the other episode's G (none left at t=2)
    np.testing.assert_allclose(pg_advantages(r, mask, 0.5), raw / np.sqrt((raw**2).sum() / 5), rtol=1e-5)
    # -mean(mask * log pi(a|s) * A): uniform logits give log(1/3) everywhere.
    net = MLPActorCritic(3, hidden_sizes=(4,))
    params = jax.tree.map(jnp.zeros_like, net.init(jax.random.PRNGKey(0), jnp.zeros((1, 2))))
    batch = dict(obs=jnp.ones((3, 2, 2)), actions=jnp.zeros((3, 2), jnp.int32), advantages=jnp.asarray(raw), mask=mask)
    np.testing.assert_allclose(inner_loss(params, batch, net.apply), -np.log(1 / 3) * raw.sum() / 5, rtol=1e-6)


# --- task distributions -------------------------------------------------------------------


def test_point_navigation_dynamics_and_reward_by_hand():
    dist = make_task_distribution(POINT)
    assert dist.num_actions == 5 and dist.obs_shape == (2,) and dist.horizon == 20
    params = PointParams(goal=jnp.array([0.3, 0.1]))
    obs, state = dist.env.reset_env(jax.random.PRNGKey(0), params)
    np.testing.assert_array_equal(obs, [0.0, 0.0])
    positions = [[0.1, 0.0], [0.2, 0.0], [0.2, 0.1], [0.2, 0.1], [0.1, 0.1], [0.1, 0.0]]
    for action, pos in zip([1, 1, 3, 0, 2, 4], positions):
        obs, state, reward, terminated, _ = dist.env.step_env(jax.random.PRNGKey(0), state, action, params)
        np.testing.assert_allclose(obs, pos, atol=1e-6)
        np.testing.assert_allclose(reward, -np.hypot(pos[0] - 0.3, pos[1] - 0.1), rtol=1e-5)
        assert not terminated
    # gymnax's step truncates at the horizon.
    _, state = dist.env.reset_env(jax.random.PRNGKey(0), params)
    for _ in range(20):
        _, state, _, terminated, truncated, _ = dist.env.step(jax.random.PRNGKey(0), state, 1, params)
    assert truncated and not terminated


def test_point_navigation_goals_fill_the_documented_square():
    goals = np.asarray(make_task_distribution(POINT).sample_tasks(jax.random.PRNGKey(0), 2000).goal)
    assert goals.shape == (2000, 2)
    assert goals.min() >= -0.5 and goals.max() <= 0.5
    assert goals.min() < -0.48 and goals.max() > 0.48 and abs(goals.mean()) < 0.02
    wide = make_task_distribution(POINT, goal_range=2.0).sample_tasks(jax.random.PRNGKey(0), 100).goal
    assert np.abs(np.asarray(wide)).max() > 1.0


def test_cartpole_lengths_vary_the_pole_per_task():
    dist = make_task_distribution(CARTPOLE)
    tasks = dist.sample_tasks(jax.random.PRNGKey(0), 500)
    length = np.asarray(tasks.length)
    assert length.min() >= 0.25 and length.max() <= 1.0 and length.std() > 0.15
    np.testing.assert_allclose(tasks.polemass_length, 0.1 * length, rtol=1e-6)
    np.testing.assert_array_equal(tasks.max_steps_in_episode, 200)
    # Same state and push, poles of different length: different angular accelerations.
    _, state = dist.env.reset_env(jax.random.PRNGKey(0), dist.default_params)
    step = jax.vmap(dist.env.step_env, in_axes=(None, None, None, 0))
    _, next_state, _, _, _ = step(jax.random.PRNGKey(0), state, 1, jax.tree.map(lambda x: x[:3], tasks))
    assert len(set(np.asarray(next_state.theta_dot).round(6))) == 3


def test_rollout_masks_terminated_episodes():
    """CartPole episodes under a random policy end well before 200 steps; after the end the
    mask and rewards are 0. PointNavigation never terminates."""
    dist = make_task_distribution(CARTPOLE)
    net = MLPActorCritic(2, hidden_sizes=(8,))
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
    task = jax.tree.map(lambda x: x[0], dist.sample_tasks(jax.random.PRNGKey(1), 1))
    traj = rollout_episodes(dist.env, task, net.apply, params, jax.random.PRNGKey(2), 4, dist.horizon)
    mask = np.asarray(traj["mask"])
    assert mask.shape == (200, 4) and (np.diff(mask, axis=0) <= 0).all() and mask[-1].sum() == 0
    np.testing.assert_array_equal(np.asarray(traj["rewards"])[mask == 0], 0.0)
    point = make_task_distribution(POINT)
    net = MLPActorCritic(5, hidden_sizes=(8,))
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))
    task = jax.tree.map(lambda x: x[0], point.sample_tasks(jax.random.PRNGKey(1), 1))
    traj = rollout_episodes(point.env, task, net.apply, params, jax.random.PRNGKey(2), 3, point.horizon)
    assert traj["obs"].shape == (20, 3, 2) and np.asarray(traj["mask"]).all()


def test_unknown_task_distribution_names_the_closest():
    assert list_task_distributions() == [CARTPOLE, POINT]
    with pytest.raises(KeyError, match="Did you mean.*PointNavigation-v0"):
        make_task_distribution("tasks/PointNavigaton-v0")


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(env="CartPole-v1"), r"MAMLConfig\.env must be a task distribution.*PointNavigation-v0"),
        (dict(env_config={"goal_radius": 1.0}), r"MAMLConfig\.env_config"),
        (dict(env_config={"goal_range": -1.0}), r"MAMLConfig\.env_config"),
        (dict(episodes_per_task=1), r"episodes_per_task must be >= 2"),
        (dict(inner_lr=0.0), r"MAMLConfig\.inner_lr"),
        (dict(inner_steps=0), r"MAMLConfig\.inner_steps"),
        (dict(num_seeds=2), r"one agent"),
        (dict(mode="ray", meta_batch_size=5, num_workers=2), r"multiple of num_workers"),
        (dict(mode="ray", num_workers=0), r"multiple of num_workers"),
    ],
)
def test_config_validation(fields, match):
    with pytest.raises(ConfigError, match=match):
        make_config(MAMLConfig, **fields)


def test_config_defaults_are_valid():
    config = MAMLConfig()
    assert config.env == POINT and config.meta_batch_size == 20 and config.inner_steps == 1
    make_config(MAMLConfig, env=CARTPOLE, env_config={"horizon": 50}, mode="ray", num_workers=4)


# --- end to end -----------------------------------------------------------------------------


STANDARD_KEYS = {
    "training_iteration",
    "env_steps_sampled",
    "env_steps_trained",
    "episode_return_mean",
    "env_steps_per_s",
    "time_s",
    "num_updates",
    "learner",
    "maml",
}


def _check_result(result: dict, iteration: int, steps_per_iteration: int) -> None:
    assert STANDARD_KEYS <= set(result)
    assert result["training_iteration"] == iteration and result["num_updates"] == iteration
    assert result["env_steps_sampled"] == result["env_steps_trained"] == iteration * steps_per_iteration
    assert np.isfinite(result["episode_return_mean"])
    assert all(np.isfinite(v) for v in result["learner"].values())
    assert set(result["maml"]) == {"pre_adaptation_return", "post_adaptation_return", "adaptation_gain"}
    assert all(np.isfinite(v) for v in result["maml"].values())


def test_device_and_ray_mode_train_the_same_run(ray_local):
    """Both modes draw tasks and episodes from the same keys: with one Ray worker the two
    runs agree (up to float rounding of differently compiled code)."""
    steps = 2 * 2 * 2 * 20  # (pre + post) x tasks x episodes x horizon
    device = Algorithm.build("MAML", **TINY)
    ray_mode = Algorithm.build("MAML", mode="ray", num_workers=1, **TINY)
    try:
        for i in (1, 2):
            r_device, r_ray = device.train(), ray_mode.train()
            _check_result(r_device, i, steps)
            _check_result(r_ray, i, steps)
            assert r_ray["maml"] == pytest.approx(r_device["maml"], rel=1e-4, abs=1e-4)
        for a, b in zip(jax.tree.leaves(device.program.get_weights()), jax.tree.leaves(ray_mode.program.get_weights())):
            np.testing.assert_allclose(a, b, atol=1e-5)
        evaluation = device.evaluate(episodes=3)
        assert evaluation["tasks"] == 3 and evaluation["episodes"] == 6
        assert evaluation["return_mean"] == evaluation["post_adaptation_return"]
        assert np.isfinite(evaluation["return_std"]) and np.isfinite(evaluation["adaptation_gain"])
        assert device.evaluate(episodes=3) == evaluation  # the held-out tasks are fixed by the seed
    finally:
        ray_mode.stop()
        device.stop()
    assert ray_mode.program.workers == []


def test_save_restore_continues_the_same_run(tmp_path):
    algo = Algorithm.build("MAML", env=CARTPOLE, env_config={"horizon": 30}, **TINY)
    algo.train()
    path = algo.save(str(tmp_path))
    restored = Algorithm.restore(str(tmp_path))
    for a, b in zip(jax.tree.leaves(algo.program.get_state()), jax.tree.leaves(restored.program.get_state())):
        np.testing.assert_array_equal(a, b)
    assert restored.iteration == 1 and restored.context.counters["num_updates"] == 1
    assert path.endswith("checkpoint_000001")
    # The restored run continues as the original does: same tasks, episodes and update.
    after, resumed = algo.train(), restored.train()
    assert resumed["maml"] == after["maml"] and resumed["env_steps_sampled"] == after["env_steps_sampled"]
    for a, b in zip(jax.tree.leaves(algo.program.get_weights()), jax.tree.leaves(restored.program.get_weights())):
        np.testing.assert_array_equal(a, b)
