"""SAC's learning functions against hand-computed values, each loss term's gradient
reaching only its own parameters, and the Polyak target update."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import make_config
from jaxflow.algorithms.sac import (
    SACConfig,
    actor_loss,
    critic_loss,
    loss,
    policy,
    soft_td_target,
    temperature_loss,
)
from jaxflow.learn import TrainState, make_optimizer, move_target, target_fraction
from jaxflow.networks import ActorCritics


def test_soft_td_target_by_hand():
    # y = r + discount * (min(q1, q2) - alpha * logp)
    y = soft_td_target(
        jnp.array([1.0, -2.0]),
        jnp.array([0.9, 0.0]),
        jnp.array([[5.0, 3.0], [4.0, 7.0]]),
        jnp.array([-1.0, 0.5]),
        jnp.float32(0.2),
    )
    np.testing.assert_allclose(y, [1.0 + 0.9 * (4.0 + 0.2), -2.0], rtol=1e-6)


def test_critic_actor_and_temperature_losses_by_hand():
    q_tm1, y, w = jnp.array([[1.0, 2.0], [3.0, 0.0]]), jnp.array([2.0, 1.0]), jnp.array([1.0, 0.5])
    value, td = critic_loss(q_tm1, y, w)
    # 0.5 * mean(w * ((1-2)^2 + (3-2)^2, (2-1)^2 + (0-1)^2)) = 0.5 * mean(2, 1) = 0.75
    assert float(value) == pytest.approx(0.75)
    np.testing.assert_allclose(td, [0.0, 0.0])  # (-1 + 1) / 2, (1 - 1) / 2
    # mean(alpha * logp - min q) = mean(0.5 * -1 - 1, 0.5 * 2 - 0) = (-1.5 + 1) / 2
    assert float(actor_loss(q_tm1, jnp.array([-1.0, 2.0]), jnp.float32(0.5))) == pytest.approx(-0.25)
    # -mean(log_alpha * (logp + target)) with log_alpha 0.3, logp (-1, 2), target -1: -0.3 * mean(-2, 1)
    assert float(temperature_loss(jnp.float32(0.3), jnp.array([-1.0, 2.0]), -1.0)) == pytest.approx(0.15)


def sac_setup():
    config = make_config(SACConfig, env="Pendulum-v1", hidden_sizes=(16, 16))
    pol = policy(config, gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-2.0, 2.0, (2,)))
    params = pol.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    batch = {
        "obs": jnp.asarray(rng.normal(size=(8, 3)), jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(8, 3)), jnp.float32),
        "actions": jnp.asarray(rng.uniform(-1, 1, size=(8, 2)), jnp.float32),
        "rewards": jnp.asarray(rng.normal(size=8), jnp.float32),
        "discounts": jnp.full(8, 0.99, jnp.float32),
        "weights": jnp.ones(8, jnp.float32),
    }
    return config, pol, params, batch


def test_each_loss_term_moves_only_its_own_parameters():
    config, pol, params, batch = sac_setup()
    target = jax.tree.map(lambda x: x + 0.1, params)
    # Compiled: run op by op, the two gradients took 12 s.
    grads = jax.jit(jax.grad(lambda p: loss(p, batch, jax.random.PRNGKey(1), target, policy=pol, config=config)[0]))(
        params
    )
    g = grads["params"]
    # The temperature's gradient is -mean(logp + target entropy) = entropy - (-A), of the fresh samples.
    _, metrics = jax.jit(lambda p: loss(p, batch, jax.random.PRNGKey(1), target, policy=pol, config=config))(params)
    assert float(g["log_alpha"]) == pytest.approx(float(metrics["entropy"]) + 2.0, rel=1e-4)

    # The critics' gradient is the critic loss's alone: the actor loss reaches them through no path.
    def critic_only(p):
        net = pol.network
        a_t, logp_t = pol.distribution.sample(
            jax.random.split(jax.random.PRNGKey(1))[0], net.apply(p, batch["next_obs"], method=ActorCritics.actor)
        )
        q_t = net.apply(target, batch["next_obs"], a_t, method=ActorCritics.critics)
        y = soft_td_target(batch["rewards"], batch["discounts"], q_t, logp_t, jnp.exp(p["params"]["log_alpha"]))
        q = net.apply(p, batch["obs"], batch["actions"], method=ActorCritics.critics)
        return critic_loss(q, y, batch["weights"])[0]

    expected = jax.jit(jax.grad(critic_only))(params)["params"]["q"]
    for got, want in zip(jax.tree.leaves(g["q"]), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert all(float(jnp.abs(x).sum()) > 0 for x in jax.tree.leaves(g["actor_torso"]))


def test_polyak_target_update_by_hand():
    state = TrainState.create({"w": jnp.array([1.0, 3.0])}, make_optimizer(0.1, 1.0), jax.random.PRNGKey(0), True)
    state = state._replace(params={"w": jnp.array([2.0, 5.0])})
    moved = move_target(state, 0.25)
    np.testing.assert_allclose(moved.target_params["w"], [1.25, 3.5])  # 1 + 0.25 * (2 - 1), 3 + 0.25 * (5 - 3)
    # Two steps of tau = 0.5 toward fixed parameters move 1 - 0.5^2 = 0.75 of the way.
    assert target_fraction(0.5, 2) == pytest.approx(0.75) and target_fraction(1.0, 7) == 1.0
