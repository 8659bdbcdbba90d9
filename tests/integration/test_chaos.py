"""The chaos run, shortened (``benchmarks/chaos.py`` runs it for minutes): Ape-X with 2
rollout workers and 2 replay shards, a worker and a shard killed in turn with ``ray.kill``
every few seconds and the driver checkpointed, stopped and restored once, must train on
without an error, bring every killed actor back and restore replay sizes exactly."""

from __future__ import annotations

import itertools
import math

from chaos_driver import SHARD, WORKER, Schedule, chaos_run

from jaxflow import Algorithm

# Faults by train() calls: a shard, then a worker, killed every 2 calls (the worker killed
# right before the driver's checkpoint at call 4), a checkpoint every 3 calls.
SCHEDULE = Schedule(length=8, kill_every=2, interrupt=True, checkpoint_every=3, by_iterations=True, alternate=True)
CARTPOLE_MAX_RETURN = 500.0  # the time limit: no episode returns more

# Small iterations and a small replay warm-up: the test is about faults, not learning.
APEX = dict(
    env="CartPole-v1",
    num_workers=2,
    num_replay_shards=2,
    num_envs_per_worker=4,
    buffer_size=20_000,
    learning_starts=200,
    min_env_steps_per_iteration=256,
    on_worker_failure="restart",
    worker_timeout_s=30.0,
)


def test_apex_survives_kills_and_an_interrupted_driver(ray_local, tmp_path):
    report = chaos_run(lambda: Algorithm.build("APEX", **APEX), SCHEDULE, str(tmp_path))
    # Both kinds were killed, and each kind came back (kills landing on an algorithm that
    # was then stopped for the interrupt are not restarted: the restore starts new actors).
    assert report.kills_of(WORKER) >= 1 and report.kills_of(SHARD) >= 1
    assert report.worker_restarts >= 1 and report.shard_restarts >= 1
    assert report.interrupted_at is not None
    # Replay sizes right after every restore equal the checkpoint's, shard by shard.
    driver = [r for r in report.restores if r.kind == "driver"]
    assert len(driver) == 1 and sum(driver[0].saved) > 0
    assert [(r.saved, r.restored) for r in report.restores if not r.equal] == []
    assert any(r.kind == SHARD and sum(r.saved) > 0 for r in report.restores)  # one reloaded a checkpoint
    # Training went on after every fault: iterations and env steps rose at every train(),
    # across the restore too (it resumed at the checkpoint's counters), and after each kill.
    iterations = [it for _, it, _ in report.progress]
    steps = [s for _, _, s in report.progress]
    assert all(b > a for a, b in itertools.pairwise(iterations))
    assert all(b > a for a, b in itertools.pairwise(steps))
    assert all(report.progress[-1][0] > t for t, _, _ in report.kills)
    # Learning-independent bound: CartPole returns lie in [1, 500] once an episode ended.
    finite = [r for r in report.returns if not math.isnan(r)]
    assert finite and all(1.0 <= r <= CARTPOLE_MAX_RETURN for r in finite)
