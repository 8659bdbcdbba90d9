"""Ape-X DDPG: DDPG's spec on Ape-X's plan, each actor exploring at its own noise scale
(measured from what real workers sampled), and the three sub-flows running on Ray."""

from __future__ import annotations

import threading

import jax
import numpy as np

from jaxflow import Algorithm, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config
from jaxflow.algorithms.apex_ddpg import worker_noise

APEX_DDPG, APEX, DDPG = (get_algorithm(n) for n in ("APEX_DDPG", "APEX", "DDPG"))


def test_it_is_ddpgs_loss_and_policy_on_apexs_plan():
    assert APEX_DDPG.plan is APEX.plan and APEX_DDPG.run.replay is APEX.run.replay
    assert APEX_DDPG.loss is DDPG.loss and APEX_DDPG.policy is DDPG.policy
    assert APEX_DDPG.action_spaces == ("Box",)


def test_each_actor_samples_with_its_own_noise_scale():
    """Actor i's actions have std 0.4^(1 + 7 i / 2) (3 actors) around the actor's mean, within
    10% over 1,024 draws (the sample std's relative error is ~2%). The actor is zeroed (mean
    action 0) so that the bounds at +-1 clip at most ~1% of the draws."""
    config = make_config(
        APEX_DDPG.config_cls,
        env="Pendulum-v1",
        num_workers=3,
        num_envs_per_worker=8,
        rollout_fragment_length=128,
        random_steps=0,
    )
    env = envs.make_cpu("Pendulum-v1")
    policy = APEX_DDPG.policy(config, env.observation_space, env.action_space)
    params = jax.tree.map(np.zeros_like, policy.init(jax.random.PRNGKey(0)))
    for i in range(3):
        worker = RolloutWorker(WorkerSpec(config, policy, explore=APEX_DDPG.workers.explore), index=i)
        worker.set_weights(params, 0)
        d = worker.sample().data
        worker.close()
        assert np.all(d["dist_inputs"] == 0)
        noise = d["actions"].ravel()
        assert noise.size == 1024 and abs(noise.std() / worker_noise(config, i) - 1) < 0.1
    assert [round(worker_noise(config, i), 4) for i in range(3)] == [0.4, 0.0162, 0.0007]


def test_apex_ddpg_runs_its_three_subflows(ray_local):
    algo = Algorithm.build(
        "APEX_DDPG",
        env="Pendulum-v1",
        # One actor: the three sub-flows (store, replay and learn, weight sync) run alike with
        # more, and each actor is a process that takes seconds to start; the actors' several
        # noise scales are measured above, on real workers.
        num_workers=1,
        num_envs_per_worker=2,
        learning_starts=200,
        random_steps=200,
        train_batch_size=64,
        replay_batch_size=128,
        min_env_steps_per_iteration=1_000,
        max_weight_sync_delay=100,
        hidden_sizes=(32, 32),
        seed=1,
    )
    try:
        results = [algo.train() for _ in range(2)]
        stats = algo.replay.stats()
    finally:
        algo.stop()
    # stop() ends the plan's threads, the to-device feeder among them (it once missed the stop
    # signal Concurrently swaps in, and every Ape-X run waited out the 30 s join timeout).
    assert algo.program.results().join(timeout_s=0)
    assert not [t.name for t in threading.enumerate() if t.name == "to-device" and t.is_alive()]
    last = results[-1]
    assert last["num_updates"] > 0 and last["env_steps_trained"] == 128 * last["num_updates"]
    assert algo.learner.version >= 2 * last["num_updates"]
    assert all(s["inserted"] > 0 and s["sampled"] > 0 for s in stats)
    assert np.isfinite(last["learner"]["critic_loss"]) and np.isfinite(last["episode_return_mean"])
