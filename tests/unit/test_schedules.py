"""Schedules of the learning rate and of loss fields over optimizer steps: the config's
checks, the values the loss and the optimizer see at each step, in Ray and device mode."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxflow import Algorithm
from jaxflow.algorithms.a2c import A2CConfig
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.config import ConfigError, make_config
from jaxflow.learn import TrainState, bind_loss, learner_optimizer, sgd_step

ENT = [[0, 0.1], [4, 0.0]]
LR = [[0, 0.1], [2, 0.0]]


@pytest.mark.parametrize(
    ("schedules", "message"),
    [
        (
            {"gamma": [[0, 0.9]]},
            r"'gamma' cannot follow a schedule; PPOConfig's fields that can: lr, max_grad_norm, clip_eps",
        ),
        ({"hidden_sizes": [[0, 1]]}, "'hidden_sizes' cannot follow a schedule"),
        ({"lr": [[5, 1e-3], [2, 0.0]]}, r"steps must be non-negative integers in increasing order, got \[5, 2\]"),
        ({"lr": [[0.5, 1e-3]]}, "steps must be non-negative integers"),
        ({"lr": []}, r"non-empty list of \[optimizer step, value\] pairs"),
        ({"lr": [[0, 1e-3, 2]]}, r"non-empty list of \[optimizer step, value\] pairs"),
        ({"lr": [[0, -1.0]]}, "PPOConfig.lr must satisfy 0 < value, got -1.0"),
        ({"clip_eps": [[0, "a"]]}, "'a' is not a number"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(schedules, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig(schedules=schedules)


def test_a_schedule_may_anneal_a_positive_field_to_zero_and_not_share_a_field_with_a_sweep():
    assert PPOConfig(schedules={"optimizer.lr": [[0, 3e-4], [1000, 0.0]]}).schedules
    with pytest.raises(ConfigError, match="'lr' is also swept"):
        make_config(PPOConfig, sweep={"optimizer.lr": [1e-3, 1e-4]}, schedules={"lr": [[0, 1e-3]]})


def _toy_loss(params, batch, rng, *, policy, config):
    """ent_coef * |w|^2: its gradient and its metrics show the config the loss was given."""
    del batch, rng, policy
    return config.ent_coef * jnp.sum(params["w"] ** 2), {"seen_ent_coef": config.ent_coef}


def test_the_loss_sees_each_scheduled_value_at_its_optimizer_step_and_the_lr_follows_its_own():
    config = A2CConfig(schedules={"ent_coef": ENT, "lr": LR})
    loss = bind_loss(_toy_loss, None, config)
    optimizer = learner_optimizer(lambda lr, max_grad_norm: optax.sgd(lr), config)
    state = TrainState.create({"w": jnp.ones(2)}, optimizer, jax.random.PRNGKey(0))
    step = jax.jit(lambda s: sgd_step(loss, optimizer, s, {}))
    seen, w = [], [1.0]
    for _ in range(5):
        state, metrics = step(state)
        seen.append((float(metrics["seen_ent_coef"]), float(metrics["ent_coef"]), float(metrics["lr"])))
        w.append(float(state.params["w"][0]))
    # Step k: ent_coef = 0.1 - 0.025 k, lr = 0.1 - 0.05 k (0 from step 2 on).
    expected = [(0.1, 0.1, 0.1), (0.075, 0.075, 0.05), (0.05, 0.05, 0.0), (0.025, 0.025, 0.0), (0.0, 0.0, 0.0)]
    np.testing.assert_allclose(seen, expected, atol=1e-7)
    # SGD on c |w|^2: w <- w (1 - 2 lr c); by hand 1 * (1 - 0.02) * (1 - 2 * 0.05 * 0.075), then no move.
    w1 = 1 - 2 * 0.1 * 0.1
    w2 = w1 * (1 - 2 * 0.05 * 0.075)
    np.testing.assert_allclose(w, [1.0, w1, w2, w2, w2, w2], rtol=1e-6)


def test_without_schedules_the_optimizer_state_is_the_factorys_own():
    """Checkpoints of runs without schedules keep their optimizer state's structure."""
    opt = learner_optimizer(lambda lr, max_grad_norm: optax.sgd(lr), A2CConfig())
    assert not hasattr(opt.init({"w": jnp.ones(1)}), "hyperparams")


def test_device_mode_follows_the_schedules_and_stops_moving_at_a_zero_learning_rate():
    """A2C takes one optimizer step per iteration, so iteration i reports step i - 1's values."""
    algo = Algorithm.build(
        "A2C",
        env="gymnax/CartPole-v1",
        num_envs=4,
        rollout_fragment_length=8,
        iterations_per_call=1,
        schedules={"ent_coef": ENT, "optimizer.lr": [[0, 1e-3], [3, 0.0]]},
    )
    reported, weights = [], []
    for _ in range(5):
        r = algo.train()
        reported.append((r["learner"]["ent_coef"], r["learner"]["lr"]))
        weights.append(algo.program.get_weights())
    algo.stop()
    np.testing.assert_allclose(
        reported, [(0.1, 1e-3), (0.075, 2e-3 / 3), (0.05, 1e-3 / 3), (0.025, 0.0), (0.0, 0.0)], rtol=1e-5
    )
    moved = [
        not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y)))
        for x, y in itertools.pairwise(weights)
    ]
    assert moved == [True, True, False, False]


def test_ray_mode_learner_follows_the_schedules(ray_local):
    algo = Algorithm.build(
        "A2C",
        env="CartPole-v1",
        num_workers=0,
        num_envs_per_worker=2,
        rollout_fragment_length=8,
        schedules={"ent_coef": ENT},
    )
    reported = [algo.train()["learner"]["ent_coef"] for _ in range(3)]
    algo.stop()
    np.testing.assert_allclose(reported, [0.1, 0.075, 0.05], rtol=1e-6)
