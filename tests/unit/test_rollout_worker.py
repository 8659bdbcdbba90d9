"""A rollout worker's fragment against the network and environment evaluated independently:
every recorded logit (the policy's distribution inputs) and value is the network's on the recorded observation, the bootstrap
value is the network's on the observation after the fragment, and a time limit's reward is
bootstrapped from the value of the final observation, found here by replaying the actions."""

from __future__ import annotations

import time

import jax
import numpy as np
import pytest
from traces import traced

from jaxflow import RolloutWorker, WorkerSpec, envs, get_algorithm, make_config, make_vector_envs
from jaxflow.api.ray_program import build_learner
from jaxflow.rollout.batch import concat_batches
from jaxflow.rollout.sample_ahead import SampleAhead


@pytest.mark.parametrize("sample_async", [False, True])
def test_fragment_matches_the_network_and_a_replay_of_its_actions(sample_async):
    spec = get_algorithm("IMPALA")
    config = make_config(
        spec.config_cls,
        env="CartPole-v1",
        env_config={"max_episode_steps": 5},
        num_workers=1,
        num_envs_per_worker=3,
        rollout_fragment_length=12,
        seed=7,
        sample_async=sample_async,
    )
    policy, learner = build_learner(config, spec)
    params = learner.get_weights()
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(params, 0)
    first, second = worker.sample(), worker.sample()

    # A twin of the worker's vector env (envpool's, which "auto" picks for CartPole where it is
    # installed, else Python's) replays the fragment's actions.
    (replay,) = make_vector_envs(config, config.seed)
    np.testing.assert_array_equal(replay.reset(), first.data["obs"][0])
    for frag in (first, second):
        d = frag.data
        logits, values = policy.apply(params, d["obs"].reshape(36, 4))
        np.testing.assert_allclose(d["dist_inputs"], np.asarray(logits).reshape(12, 3, 2), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d["values"], np.asarray(values).reshape(12, 3), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            d["bootstrap_value"], np.asarray(policy.apply(params, d["last_obs"])[1]), rtol=1e-5, atol=1e-6
        )
        truncations = 0
        for t in range(12):
            step = replay.step(d["actions"][t])
            expected = step.reward.astype(np.float64)
            cut = step.truncated & ~step.terminated
            if cut.any():
                truncations += cut.sum()
                v_final = np.asarray(policy.apply(params, step.final_obs)[1])
                expected = expected + config.gamma * cut * v_final
            np.testing.assert_allclose(d["rewards"][t], expected, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(
                d["discounts"][t], np.float32(config.gamma) * ~(step.terminated | step.truncated)
            )
            next_obs = d["obs"][t + 1] if t < 11 else d["last_obs"]
            np.testing.assert_array_equal(step.obs, next_obs)
        assert truncations >= 6  # two time limits per copy per fragment: the bootstrap is exercised
    assert first.env_steps == second.env_steps == 36
    worker.close()


def test_sac_worker_acts_with_the_actor_alone_and_bootstraps_time_limits_from_the_critics():
    """SAC's steps read no value, so a worker acts with the actor alone (values 0), and a time
    limit's reward still gets ``gamma * min_i Q_i(s_T, tanh(mean))`` of the final observation."""
    spec = get_algorithm("SAC")
    config = make_config(
        spec.config_cls,
        env="Pendulum-v1",
        env_config={"max_episode_steps": 5},
        num_workers=1,
        rollout_fragment_length=8,
        seed=3,
    )
    policy, learner = build_learner(config, spec)
    params = learner.get_weights()
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(params, 0)
    assert worker.act_forward is not worker.forward
    d = worker.sample().data
    (replay,) = make_vector_envs(config, config.seed)
    np.testing.assert_array_equal(replay.reset(), d["obs"][0])
    inputs, _ = policy.apply(params, d["obs"].reshape(8, 3))
    np.testing.assert_allclose(d["dist_inputs"], np.asarray(inputs).reshape(8, 1, 2), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(d["values"], np.zeros((8, 1), np.float32))
    truncations = 0
    for t in range(8):
        step = replay.step(policy.distribution.to_env(d["actions"][t]))
        expected = step.reward.astype(np.float64)
        if step.truncated.any():
            truncations += 1
            expected = expected + config.gamma * np.asarray(policy.apply(params, step.final_obs)[1])
        np.testing.assert_allclose(d["rewards"][t], expected, rtol=1e-5, atol=1e-5)
    assert truncations == 1  # step 5 of 8 ends the first episode at its time limit
    worker.close()


def test_sample_timing_splits_the_workers_time_between_env_and_policy():
    # Every step of every copy sleeps 5 ms: the env's share is known from below, and the
    # rest of the fragment (a small MLP's forward passes, bookkeeping) is far cheaper.
    spec = get_algorithm("IMPALA")
    config = make_config(
        spec.config_cls,
        env="test/SlowStep-v0",
        env_config={"step_s": 0.005},
        num_workers=1,
        num_envs_per_worker=2,
        rollout_fragment_length=10,
        seed=0,
    )
    policy, learner = build_learner(config, spec)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(learner.get_weights(), 0)
    worker.sample()  # compiles the forward pass
    timing = worker.sample().timing
    assert timing.env_s >= 2 * 10 * 0.005
    assert timing.policy_s > 0.0
    assert timing.env_s + timing.policy_s <= timing.sample_s
    assert timing.env_s / timing.sample_s > 0.6
    both = concat_batches([worker.sample(), worker.sample()]).timing
    assert both.env_s >= 2 * 2 * 10 * 0.005 and both.sample_s >= both.env_s + both.policy_s


@pytest.mark.parametrize("groups", [1, 2])
def test_ale_worker_fragment_matches_a_replay_of_its_actions(groups):
    # The ALE backend steps while the worker copies into the fragment, and with two groups one
    # steps while the other is given actions: the copies must still pair each observation
    # with the action taken on it and the step that followed, env by env, as one vector of
    # all the envs (the groups' envs are seeded as its envs are) replays them.
    spec = get_algorithm("IMPALA")
    config = make_config(
        spec.config_cls,
        env="ALE/Pong-v5",
        vector_env="ale",
        env_config={"max_num_frames_per_episode": 40},
        num_workers=1,
        num_envs_per_worker=2,
        num_env_groups=groups,
        num_cpus_per_worker=1,
        rollout_fragment_length=20,
        seed=3,
    )
    policy, learner = build_learner(config, spec)
    params = learner.get_weights()
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(params, 0)
    d = worker.sample().data

    replay = envs.ALEVectorEnv("ALE/Pong-v5", 2, config.seed, config.env_config, num_threads=1)
    np.testing.assert_array_equal(replay.reset(), d["obs"][0])
    value = jax.jit(policy.apply)  # one compilation, not one per operation of the network
    truncations = 0
    for t in range(20):
        step = replay.step(d["actions"][t])
        cut = step.truncated & ~step.terminated
        expected = step.reward.astype(np.float64)
        if cut.any():
            truncations += cut.sum()
            expected = expected + config.gamma * cut * np.asarray(value(params, step.final_obs)[1])
        np.testing.assert_allclose(d["rewards"][t], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(d["discounts"][t], np.float32(config.gamma) * ~(step.terminated | step.truncated))
        np.testing.assert_array_equal(step.obs, d["obs"][t + 1] if t < 19 else d["last_obs"])
    assert truncations >= 2  # 40 frames are at most 10 agent steps: each copy hits the time limit
    replay.close()


def test_sample_ahead_keeps_order_runs_one_ahead_and_reraises_errors():
    started = []

    def rollout():
        started.append(len(started))
        if len(started) == 4:
            raise ValueError("env exploded")
        return started[-1]

    def started_at_least(n):
        deadline = time.monotonic() + 30.0
        while len(started) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(started) >= n

    ahead = SampleAhead(rollout)
    assert started == []  # nothing runs before the first take()
    assert ahead.take() == 0
    for expected in (1, 2):
        assert started_at_least(expected + 1)
        time.sleep(0.05)  # room to run further ahead, which it must not
        assert len(started) == expected + 1
        assert ahead.take() == expected
    for _ in range(2):  # the error, then the same error again instead of a hang
        with pytest.raises(ValueError, match="env exploded"):
            ahead.take()

    closed = SampleAhead(lambda: time.sleep(0.2) or "fragment")
    assert closed.take() == "fragment"
    closed.close()  # waits for the rollout in progress
    with pytest.raises(RuntimeError, match="closed"):
        closed.take()
    never_started = SampleAhead(lambda: "fragment")
    never_started.close()
    with pytest.raises(RuntimeError, match="closed"):
        never_started.take()


def test_sampling_ahead_reports_the_weights_each_fragment_acted_with():
    # The thread steps the next fragment as soon as one is taken: given new weights after
    # that, the next fragment is still one acted with the old ones, and it must say so;
    # every fragment's logits are those of the weights of the version it reports.
    spec = get_algorithm("IMPALA")
    config = make_config(
        spec.config_cls,
        env="CartPole-v1",
        num_workers=1,
        num_envs_per_worker=2,
        rollout_fragment_length=8,
        seed=1,
        sample_async=True,
    )
    policy, learner = build_learner(config, spec)
    old = learner.get_weights()
    new = jax.tree.map(lambda x: x + 0.05, old)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(old, 0)
    batches = [worker.sample()]
    deadline = time.monotonic() + 30.0
    while worker.env_steps < 2 * 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert worker.env_steps == 2 * 16  # the second fragment was stepped unasked, and no third
    worker.set_weights(new, 1)
    batches += [worker.sample() for _ in range(3)]
    assert [b.weights_version for b in batches] == [0, 0, 1, 1]
    for b in batches:
        params = (old, new)[b.weights_version]
        logits, _ = policy.apply(params, b.data["obs"].reshape(16, 4))
        np.testing.assert_allclose(b.data["dist_inputs"], np.asarray(logits).reshape(8, 2, 2), rtol=1e-5, atol=1e-6)
    worker.close()


def test_an_env_error_in_the_sampler_thread_reaches_the_caller():
    spec = get_algorithm("IMPALA")
    config = make_config(
        spec.config_cls,
        env="test/WrongObservationShape-v0",
        num_workers=1,
        num_envs_per_worker=2,
        rollout_fragment_length=4,
        sample_async=True,
    )
    policy, learner = build_learner(config, spec)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(learner.get_weights(), 0)
    for _ in range(2):
        with pytest.raises(envs.EnvSpaceError, match="test/WrongObservationShape-v0"):
            worker.sample()
    worker.close()


@pytest.mark.parametrize(
    "name, env, settings",
    [
        ("PPO", "CartPole-v1", {"lstm_size": 16}),
        ("SAC", "Pendulum-v1", {}),
        ("Rainbow", "CartPole-v1", {"noisy": True}),
    ],
    ids=["recurrent", "squashed-gaussian", "noisy-q"],
)
def test_a_worker_compiles_its_policy_once(name, env, settings):
    """After the first fragments, new weights and more fragments trace nothing: a worker that
    compiled again (a weakly typed input, a shape or a static argument that changes between
    fragments) would pay a compilation every fragment or every weight sync."""
    spec = get_algorithm(name)
    config = make_config(spec.config_cls, env=env, num_workers=1, seed=0, **settings)
    policy, learner = build_learner(config, spec)
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(learner.get_weights(), 0)
    worker.sample(), worker.sample()
    with traced() as names:
        worker.set_weights(learner.get_weights(), 1)
        for _ in range(3):
            worker.sample()
    assert names == []
