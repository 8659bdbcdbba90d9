"""Divergence guards: a NaN from an environment stops its worker on that step, a NaN loss or
gradient leaves the parameters as they were (and stops the run, or is skipped and counted),
and a checkpoint of non-finite parameters is never written."""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxflow import Algorithm, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config
from jaxflow.api import load_policy
from jaxflow.api.checkpoint import CheckpointError
from jaxflow.api.loop import train
from jaxflow.dataflow import WorkerError
from jaxflow.learn import Learner, TrainState, sgd_step
from jaxflow.learn.learner import NonFiniteUpdateError
from jaxflow.rollout.guards import EnvValueError, PolicyOutputError

PPO = get_algorithm("PPO")


@pytest.mark.parametrize("field", ["observation", "reward"])
def test_a_nan_from_an_env_stops_the_worker_on_that_step_naming_env_worker_and_field(field):
    config = make_config(
        PPO.config_cls,
        env="test/NaNAfter-v0",
        env_config={"at_step": 50, "field": field},
        num_envs_per_worker=2,
        rollout_fragment_length=16,
    )
    env = envs.make_cpu("CartPole-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    worker = RolloutWorker(WorkerSpec(config, policy), index=1)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    # Steps 1..48 (3 fragments of 16 steps x 2 envs = env steps 0..95) are fine; each env's
    # 50th step is the worker's vector step 49, env steps 98 and 99.
    for _ in range(3):
        worker.sample()
    with pytest.raises(
        EnvValueError,
        match=rf"rollout worker 1: env 'test/NaNAfter-v0' returned a NaN or infinite {field} at the worker's env "
        r"step 98 \(envs \[0, 1\] of its vector\)",
    ):
        worker.sample()
    worker.close()


def test_with_check_finite_off_the_nan_goes_through():
    config = make_config(
        PPO.config_cls,
        env="test/NaNAfter-v0",
        env_config={"at_step": 50},
        check_finite=False,
        num_envs_per_worker=1,
        rollout_fragment_length=16,
    )
    env = envs.make_cpu("CartPole-v1")
    policy = PPO.policy(config, env.observation_space, env.action_space)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    for _ in range(3):
        worker.sample()
    with pytest.raises(
        PolicyOutputError,
        match=r"the policy \(the default network\) gave NaN or infinite outputs for 1 of 1 observations .*"
        r"\(check_finite=false lets NaN or infinite observations reach the policy\)",
    ):
        worker.sample()  # the next guard: the policy's outputs on a NaN observation, each counted once
    worker.close()


def _loss(params, batch, rng):
    """(w - x)^2, NaN where the batch says so."""
    del rng
    loss = jnp.mean((params["w"] - batch["x"]) ** 2) + jnp.where(batch["poison"].reshape(-1)[0] > 0, jnp.nan, 0.0)
    return loss, {}


def test_a_nan_loss_leaves_parameters_and_optimizer_state_unchanged():
    opt = optax.adam(0.1)
    state = TrainState.create({"w": jnp.ones(3)}, opt, jax.random.PRNGKey(0))
    good = {"x": jnp.zeros(3), "poison": jnp.zeros(3)}
    state, m = sgd_step(_loss, opt, state, good)
    assert float(m["nonfinite_step_fraction"]) == 0.0
    before = state
    state, m = sgd_step(_loss, opt, state, dict(good, poison=jnp.ones(3)))
    assert float(m["nonfinite_step_fraction"]) == 1.0 and int(state.step) == 2
    for a, b in zip(
        jax.tree.leaves((before.params, before.opt_state)), jax.tree.leaves((state.params, state.opt_state))
    ):
        np.testing.assert_array_equal(a, b)


def test_the_learner_raises_on_a_nan_update_or_skips_and_counts_it():
    batch = {"x": np.zeros((4, 3), np.float32), "poison": np.ones((4, 3), np.float32)}
    strict = Learner(_loss, optax.adam(0.1), {"w": jnp.ones(3)}, minibatch_size=2)
    with pytest.raises(
        NonFiniteUpdateError, match="NaN or infinite in 100% of the SGD steps of the update ending at optimizer step 2"
    ):
        strict.update(batch)
    np.testing.assert_array_equal(strict.get_weights()["w"], np.ones(3))
    lenient = Learner(_loss, optax.adam(0.1), {"w": jnp.ones(3)}, minibatch_size=2, on_nonfinite="skip")
    mixed = {"x": batch["x"], "poison": np.array([[1] * 3, [1] * 3, [0] * 3, [0] * 3], np.float32)}
    assert lenient.update(mixed)["nonfinite_step_fraction"] == 0.5  # the first minibatch skipped
    assert np.all(lenient.get_weights()["w"] < 1)  # the second stepped


def test_save_refuses_non_finite_parameters_and_writes_nothing(ray_local, tmp_path):
    algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=0, num_envs_per_worker=2, rollout_fragment_length=8)
    try:
        state = algo.learner.state
        algo.learner.state = state._replace(params=jax.tree.map(lambda x: x * jnp.nan, state.params))
        with pytest.raises(CheckpointError, match="refusing to save a checkpoint with NaN or infinite values"):
            algo.save(str(tmp_path))
        assert os.listdir(tmp_path) == []
    finally:
        algo.stop()


def test_a_run_on_a_nan_env_fails_on_that_step_and_leaves_only_finite_checkpoints(ray_local, tmp_path):
    algo = Algorithm.build(
        "PPO",
        env="test/NaNAfter-v0",
        env_config={"at_step": 100},
        num_workers=1,
        num_envs_per_worker=2,
        rollout_fragment_length=16,
        train_batch_size=32,
        minibatch_size=32,
    )
    # The worker's own error type reaches the caller, as it does from a worker in this process.
    with pytest.raises(
        EnvValueError, match=r"rollout worker 0: env 'test/NaNAfter-v0' returned a NaN or infinite observation"
    ) as raised:
        train(algo, {"training_iteration": 50}, str(tmp_path), checkpoint_every=1, verbose=False)
    assert isinstance(raised.value, WorkerError)  # naming the actor, as before
    with open(tmp_path / "error.log", encoding="utf-8") as f:
        assert "EnvValueError: rollout worker 0" in f.read()  # the traceback, kept in the run
    saved = sorted(d for d in os.listdir(tmp_path) if d.startswith("checkpoint_"))
    assert saved  # iterations before the NaN step were checkpointed
    _, _, params, _ = load_policy(str(tmp_path))
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


def _nan_device_run(field: str, **settings):
    """Device-mode PPO on 4 copies of gymnax CartPole whose ``field`` turns NaN at each
    episode's 5th step (no episode of CartPole ends within 5 steps): 2 iterations of 4 steps
    per call, so the first NaN comes at the second iteration's first step, env step 16."""
    return Algorithm.build(
        "PPO",
        env="test/NaNAfterJax-v0",
        env_config={"at_step": 5, "nan_reward": field == "reward"},
        mode="device",
        num_envs=4,
        rollout_fragment_length=4,
        minibatch_size=16,
        iterations_per_call=2,
        **settings,
    )


@pytest.mark.parametrize("field", ["observation", "reward"])
def test_device_mode_stops_at_the_first_nan_env_step_naming_env_member_field_and_step(field, tmp_path):
    algo = _nan_device_run(field)
    with pytest.raises(
        EnvValueError,
        match=re.escape(
            f"device mode, member 0: env 'test/NaNAfterJax-v0' returned a NaN or infinite {field} at env step 16 "
            "(env 0 of 4, step 0 of iteration 2)"
        ),
    ):
        algo.train()
    # The update on the NaN step was skipped: the parameters stay finite; the env state does not, so
    # nothing of the diverged run is saved.
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(algo.program.get_weights()))
    with pytest.raises(CheckpointError, match="refusing to save a checkpoint with NaN or infinite values"):
        algo.save(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_device_mode_with_check_finite_off_lets_the_nan_through_to_the_loss_guard():
    algo = _nan_device_run("observation", check_finite=False)
    with pytest.raises(NonFiniteUpdateError, match=r"ending at iteration 2 \(device mode\)"):
        algo.train()
