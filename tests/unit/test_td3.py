"""TD3's parts: target policy smoothing by hand, the actor stepping every policy_delay SGD
steps while the critics step every time, exploration noise of the stated size, and DDPG as
TD3 with its additions off."""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxflow import make_config
from jaxflow.algorithms.sac import SACConfig
from jaxflow.algorithms.td3 import DDPGConfig, TD3Config, explore, loss, optimizer, policy, smoothed_target_actions
from jaxflow.learn import TrainState, bind_loss, make_optimizer, sgd_step, sgd_update

OBS, ACT = gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Box(-2.0, 2.0, (2,))


def transitions(n: int, seed: int) -> dict[str, jax.Array]:
    """``n`` random replayed transitions of OBS and ACT's shapes."""
    rng = np.random.default_rng(seed)
    return {
        "obs": jnp.asarray(rng.normal(size=(n, 3)), jnp.float32),
        "next_obs": jnp.asarray(rng.normal(size=(n, 3)), jnp.float32),
        "actions": jnp.asarray(rng.uniform(-1, 1, (n, 2)), jnp.float32),
        "rewards": jnp.asarray(rng.normal(size=n), jnp.float32),
        "discounts": jnp.full(n, 0.99, jnp.float32),
        "weights": jnp.ones(n, jnp.float32),
    }


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
    batch = transitions(16, seed=0)

    @jax.jit  # one compile; run op by op, six steps took 15 s
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


def test_pytorch_layer_init_starts_every_layer_uniform_in_one_over_root_fan_in():
    """TD3's (and DDPG's) default start; SAC keeps flax's, and either takes the other by name."""
    config = make_config(TD3Config, env="Pendulum-v1", hidden_sizes=(400, 300))
    assert config.layer_init == make_config(DDPGConfig, env="Pendulum-v1").layer_init == "pytorch"
    assert make_config(SACConfig, env="Pendulum-v1").layer_init == "flax"
    params = policy(config, OBS, ACT).init(jax.random.PRNGKey(0))["params"]
    actor, critics = params["actor_torso"], params["q"]
    # fan-ins: the actor's layers see 3 observations, 400 and 300 units; a critic's first sees 3 + 2 actions
    layers = [(actor["layers_0"], 3), (actor["layers_2"], 400), (actor["layers_4"], 300), (critics["Dense_0"], 5)]
    for layer, fan_in in layers:
        bound = 1 / np.sqrt(fan_in)
        for values in (layer["kernel"], layer["bias"]):
            values = np.asarray(values).ravel()
            assert np.abs(values).max() <= bound  # U(-bound, bound): std bound / sqrt(3)
            assert values.std() == pytest.approx(bound / np.sqrt(3), rel=0.15 if values.size < 1000 else 0.03)
    flax_start = make_config(TD3Config, env="Pendulum-v1", hidden_sizes=(400, 300), layer_init="flax")
    flax_default = policy(flax_start, OBS, ACT)
    first = flax_default.init(jax.random.PRNGKey(0))["params"]["actor_torso"]["layers_0"]
    assert not np.asarray(first["bias"]).any()  # flax's: zero biases, LeCun-normal kernels (std 1/sqrt(fan_in))
    assert np.asarray(first["kernel"]).std() == pytest.approx(1 / np.sqrt(3), rel=0.1)


def test_skipping_the_actors_gradient_between_its_steps_equals_delayed_adam_on_full_gradients():
    # The learner's path (bind_loss hands TD3's loss the step, sgd_update scans the steps)
    # against a hand-rolled reference: full gradients every step, the critics' Adam every
    # step, the actor's Adam only on steps 0, k, 2k, ...
    config = make_config(TD3Config, env="Pendulum-v1", hidden_sizes=(16,), policy_delay=3)
    pol = policy(config, OBS, ACT)
    params = pol.init(jax.random.PRNGKey(0))
    n, steps = 8, 7
    batch = transitions(n * steps, seed=0)
    opt = optimizer(config)(1e-3, 1e6)
    state = TrainState.create(params, opt, jax.random.PRNGKey(1), target_network=True)
    fast, _ = jax.jit(lambda s, b: sgd_update(bind_loss(loss, pol, config), opt, 1, n, s, b))(state, batch)

    adam = make_optimizer(1e-3, 1e6)
    is_actor = jax.tree_util.tree_map_with_path(lambda path, _: "actor_torso" in str(path), params)
    grad = jax.jit(jax.grad(functools.partial(loss, policy=pol, config=config), has_aux=True))
    p, opt_actor, opt_critics = params, adam.init(params), adam.init(params)
    for i in range(steps):
        b = {k: v[i * n : (i + 1) * n] for k, v in batch.items()}
        key = jax.random.fold_in(fast.rng, i)  # sgd_update's key for step i
        grads, _ = grad(p, b, key, state.target_params)
        critic_grads = jax.tree.map(lambda g, a: jnp.where(a, 0.0, g), grads, is_actor)
        updates, opt_critics = adam.update(critic_grads, opt_critics, p)
        if i % config.policy_delay == 0:
            actor_grads = jax.tree.map(lambda g, a: jnp.where(a, g, 0.0), grads, is_actor)
            actor_updates, opt_actor = adam.update(actor_grads, opt_actor, p)
            updates = jax.tree.map(lambda u, v, a: jnp.where(a, v, u), updates, actor_updates, is_actor)
        p = optax.apply_updates(p, updates)
    assert int(fast.step) == steps
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), fast.params, p)


def test_the_actor_loss_metric_is_the_actors_loss_over_each_policy_delay_steps():
    # Between actor steps the actor loss is not computed: its metric is policy_delay times the
    # loss on actor steps and 0 in between, so every policy_delay steps average to the loss.
    config = make_config(TD3Config, env="Pendulum-v1", hidden_sizes=(16,), policy_delay=2)
    pol = policy(config, OBS, ACT)
    opt = optimizer(config)(1e-3, 1e6)
    state = TrainState.create(pol.init(jax.random.PRNGKey(0)), opt, jax.random.PRNGKey(1), target_network=True)
    batch = transitions(16, seed=1)
    step = jax.jit(lambda s: sgd_step(bind_loss(loss, pol, config), opt, s, batch))
    unskipped = jax.jit(lambda s: loss(s.params, batch, s.rng, s.target_params, policy=pol, config=config)[1])
    reported, actor = [], []
    for _ in range(4):
        actor.append(float(unskipped(state)["actor_loss"]))  # the loss at this step's params
        state, metrics = step(state)
        reported.append(float(metrics["actor_loss"]))
    assert reported[1] == reported[3] == 0.0
    assert reported[0] == pytest.approx(2 * actor[0], rel=1e-6) and reported[2] == pytest.approx(2 * actor[2], rel=1e-6)
    assert np.mean(reported) == pytest.approx(np.mean([actor[0], actor[2]]), rel=1e-6)
    assert actor[0] != pytest.approx(actor[2])  # the actor stepped in between
