"""TD3's parts: target policy smoothing by hand, the actor stepping every policy_delay SGD
steps while the critics step every time, exploration noise of the stated size, and DDPG as
TD3 with its additions off."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import make_config
from jaxflow.algorithms.td3 import DDPGConfig, TD3Config, explore, loss, optimizer, policy, smoothed_target_actions
from jaxflow.learn import TrainState, sgd_step

OBS, ACT = gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-2.0, 2.0, (2,))


def test_smoothed_target_actions_clip_the_noise_and_the_action():
    mu = jnp.array([[0.0, 0.95], [-0.5, -1.0]])
    out = smoothed_target_actions(jax.random.PRNGKey(0), mu, noise=10.0, noise_clip=0.5)
    # With noise this large every draw is clipped to +-0.5, then the action to [-1, 1].
    gaps = np.abs(np.asarray(out - mu, np.float64)).ravel()
    assert all(min(abs(g - v) for v in (0.5, 0.05, 0.0)) < 1e-6 for g in gaps), gaps
    assert float(jnp.abs(out).max()) <= 1.0
    np.testing.assert_array_equal(smoothed_target_actions(jax.random.PRNGKey(0), mu, 0.0, 0.5), mu)


def test_the_actor_steps_every_policy_delay_steps_and_the_critics_every_step():
    config = make_config(TD3Config, env="Pendulum-v1", hidden_sizes=(16,), policy_delay=3)
    pol = policy(config, OBS, ACT)
    params = pol.init(jax.random.PRNGKey(0))
    opt = optimizer(config)(1e-3, 1e6)
    state = TrainState.create(params, opt, jax.random.PRNGKey(1), target_network=True)
    rng = np.random.default_rng(0)
    batch = {
        "obs": jnp.asarray(rng.normal(size=(16, 3)), jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(16, 3)), jnp.float32),
        "actions": jnp.asarray(rng.uniform(-1, 1, (16, 2)), jnp.float32),
        "rewards": jnp.asarray(rng.normal(size=16), jnp.float32),
        "discounts": jnp.full(16, 0.99, jnp.float32),
        "weights": jnp.ones(16, jnp.float32),
    }

    def step(s):
        return sgd_step(lambda p, b, k, t: loss(p, b, k, t, policy=pol, config=config), opt, s, batch)[0]

    actor_moved, critics_moved = [], []
    for _ in range(6):
        new = step(state)
        changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), new.params["params"], state.params["params"])
        actor_moved.append(all(jax.tree.leaves(changed["actor_torso"])))
        critics_moved.append(all(jax.tree.leaves(changed["q"])))
        state = new
    assert actor_moved == [True, False, False, True, False, False]
    assert all(critics_moved)


def test_exploration_is_uniform_first_then_the_actor_plus_gaussian_noise():
    config = make_config(TD3Config, env="Pendulum-v1", random_steps=100, exploration_noise=0.1)
    inputs = np.full((50_000, 1), 0.5, np.float32)
    early, logp = explore(np.random.default_rng(0), inputs, config, 0, env_steps=99)
    assert not logp.any() and abs(early.mean()) < 0.01 and early.std() == pytest.approx(1 / np.sqrt(3), rel=0.01)
    late, _ = explore(np.random.default_rng(0), inputs, config, 0, env_steps=100)
    assert late.mean() == pytest.approx(np.tanh(0.5), abs=2e-3) and late.std() == pytest.approx(0.1, rel=0.02)


def test_ddpg_is_td3_with_one_critic_no_smoothing_and_no_delay():
    config = make_config(DDPGConfig, env="Pendulum-v1")
    assert (config.twin_q, config.target_noise, config.policy_delay) == (False, 0.0, 1)
    params = policy(config, OBS, ACT).init(jax.random.PRNGKey(0))
    assert params["params"]["q"]["Dense_0"]["kernel"].shape[0] == 1  # one critic
