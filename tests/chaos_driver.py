"""A chaos run: an :class:`~jaxflow.Algorithm` trained for a fixed wall-clock time while a
background thread kills a rollout worker or a replay shard with ``ray.kill`` every few
seconds, and the driver is interrupted once at mid-run (checkpoint, ``stop``,
``Algorithm.restore``, continue). It records what a fault-tolerant run must show: the
kills and restarts, every replay restore against the checkpoint it read, and the progress
of every iteration. One implementation, used by ``tests/integration/test_chaos.py`` (short)
and ``benchmarks/chaos.py`` (minutes, against a fault-free run of the same length).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from jaxflow import Algorithm

WORKER, SHARD = "worker", "shard"
SETTLE_TIMEOUT_S = 180.0
"""How long training goes on after the run's length, at most, until every killed actor is back."""


@dataclasses.dataclass
class RestoreCheck:
    """Replay sizes right after one restore against the checkpoint it read."""

    kind: str
    """``"driver"`` (``Algorithm.restore``) or ``"shard"`` (a killed shard recreated)."""
    checkpoint: str | None
    saved: list[int]
    """Items per shard in the checkpoint (0 for every shard where there was none yet)."""
    restored: list[int]
    """Items per shard after the restore; for a shard restore, only that shard's entry is
    compared (the others have kept training)."""
    shard: int | None = None

    @property
    def equal(self) -> bool:
        if self.shard is not None:
            return self.saved[self.shard] == self.restored[self.shard]
        return self.saved == self.restored


@dataclasses.dataclass
class ChaosReport:
    """What one timed run saw."""

    seconds: float
    progress: list[tuple[float, int, int]]
    """``(seconds since start, training_iteration, env_steps_sampled)`` after each ``train()``."""
    returns: list[float]
    """``episode_return_mean`` after each ``train()`` (NaN before an episode ended)."""
    kills: list[tuple[float, str, int]] = dataclasses.field(default_factory=list)
    """``(seconds, WORKER or SHARD, index)`` of every ``ray.kill``."""
    worker_restarts: int = 0
    shard_restarts: int = 0
    restores: list[RestoreCheck] = dataclasses.field(default_factory=list)
    interrupted_at: float | None = None
    timed_env_steps: int = 0
    """``env_steps_sampled`` when the run's length was reached (before settling)."""

    @property
    def steps_per_s(self) -> float:
        """Env steps per second of the run's length: what a restore lost is not counted."""
        return self.timed_env_steps / self.seconds

    def kills_of(self, kind: str) -> int:
        return sum(1 for _, k, _ in self.kills if k == kind)

    @property
    def final_return(self) -> float | None:
        finite = [r for r in self.returns if not math.isnan(r)]
        return finite[-1] if finite else None


def checkpoint_sizes(path: str | None, num_shards: int) -> list[int]:
    """Items per replay shard stored in the checkpoint at ``path`` (what ``ReplayShards.save``
    returned when it wrote them), read from each shard file's metadata; zeros for no checkpoint."""
    if path is None:
        return [0] * num_shards
    sizes = []
    for i in range(num_shards):
        with np.load(os.path.join(path, f"replay_shard_{i}.npz"), allow_pickle=False) as f:
            sizes.append(int(json.loads(f["__meta__"].tobytes().decode())["buffer"]["size"]))
    return sizes


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the faults come, on one clock: wall-clock seconds since the build (the benchmark:
    kills from a background thread, at any point of an iteration) or ``train()`` calls
    (the test: kills between calls, the same sequence however loaded the machine is)."""

    length: float
    """How long the run trains (whole iterations)."""
    kill_every: float | None = None
    """A random rollout worker or replay shard is killed this often."""
    interrupt: bool = False
    """The driver checkpoints, stops and restores once, at ``length / 2``."""
    checkpoint_every: float | None = None
    """A checkpoint is written this often; a killed shard reloads the last one."""
    by_iterations: bool = False
    alternate: bool = False
    """Kill a shard and a worker in turn (random ones of that kind), so few kills hit both."""
    seed: int = 0


class _Killer:
    """Kills one rollout worker or replay shard of ``run.algo`` holding ``run.lock``, so
    never during a checkpoint or a restore; :meth:`start` does it every ``every`` seconds
    on a thread."""

    def __init__(self, run: _Run, schedule: Schedule):
        self.chaos, self.schedule = run, schedule
        self.rng = random.Random(schedule.seed)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="chaos-killer", daemon=True)

    def targets(self) -> list[tuple[str, int, Any]]:
        algo = self.chaos.algo
        found = [(WORKER, i, h) for i, h in list(algo.workers.live())]
        if algo.replay is not None:
            found += [(SHARD, i, h) for i, h in enumerate(list(algo.replay.actors))]
        return found

    def kill(self) -> None:
        with self.chaos.lock:
            targets = self.targets()
            if self.schedule.alternate:
                kinds = sorted({kind for kind, _, _ in targets})
                want = kinds[len(self.chaos.report.kills) % len(kinds)]
                targets = [t for t in targets if t[0] == want]
            kind, index, handle = self.rng.choice(targets)
            ray.kill(handle, no_restart=True)
            self.chaos.report.kills.append((self.chaos.elapsed(), kind, index))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()

    def _loop(self) -> None:
        assert self.schedule.kill_every is not None
        while not self.stopped.wait(self.schedule.kill_every):
            self.kill()


class _Run:
    def __init__(self, algo: Algorithm, checkpoint_dir: str):
        self.algo, self.checkpoint_dir = algo, checkpoint_dir
        self.lock = threading.Lock()
        self.report = ChaosReport(0.0, [], [])
        self.t0 = time.perf_counter()
        self._restarts_before = (0, 0)  # of algorithms already stopped
        self._shards = self._shard_handles()

    def _shard_handles(self) -> list[Any]:
        return [] if self.algo.replay is None else list(self.algo.replay.actors)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def restarts(self) -> tuple[int, int]:
        replay = self.algo.replay
        return self.algo.workers.num_restarts, 0 if replay is None else replay.num_restarts

    def train(self) -> None:
        result = self.algo.train()
        self.report.progress.append(
            (self.elapsed(), int(result["training_iteration"]), int(result["env_steps_sampled"]))
        )
        self.report.returns.append(float(result["episode_return_mean"]))
        self._check_shard_restores()

    def _check_shard_restores(self) -> None:
        replay = self.algo.replay
        if replay is None:
            return
        # A shard's new handle is published after its restore is recorded (ReplayShards._restart).
        handles = list(replay.actors)
        sizes, sources = replay.restored_sizes, replay.restored_checkpoints
        for shard, handle in enumerate(handles):
            if handle is not self._shards[shard]:
                saved = checkpoint_sizes(sources[shard], len(handles))
                restored = [*saved[:shard], sizes[shard], *saved[shard + 1 :]]
                self.report.restores.append(RestoreCheck(SHARD, sources[shard], saved, restored, shard))
        self._shards = handles

    def save(self) -> str:
        with self.lock:
            path = self.algo.save(self.checkpoint_dir)
            self._check_shard_restores()  # a shard found dead by the save is restarted by it
            return path

    def interrupt(self) -> None:
        """Checkpoint, stop, restore from the checkpoint: the driver interrupted and resumed."""
        with self.lock:
            self.report.interrupted_at = self.elapsed()
            path = self.algo.save(self.checkpoint_dir)
            self._check_shard_restores()
            workers, shards = self.restarts()
            self._restarts_before = (self._restarts_before[0] + workers, self._restarts_before[1] + shards)
            self.algo.stop()
            self.algo = Algorithm.restore(path)
            self._shards = self._shard_handles()
            if self.algo.replay is not None:  # nothing samples until the next train()
                n = len(self.algo.replay.actors)
                restored = [s["size"] for s in self.algo.replay.stats()]
                self.report.restores.append(RestoreCheck("driver", path, checkpoint_sizes(path, n), restored))

    def finish(self) -> None:
        workers, shards = self.restarts()
        self.report.worker_restarts = self._restarts_before[0] + workers
        self.report.shard_restarts = self._restarts_before[1] + shards


def chaos_run(build: Callable[[], Algorithm], schedule: Schedule, checkpoint_dir: str) -> ChaosReport:
    """Trains ``build()`` under ``schedule``'s faults, writing checkpoints under
    ``checkpoint_dir``. After the run's length the kills stop and training goes on (at most
    ``SETTLE_TIMEOUT_S``) until every killed actor has come back. Always stops
    the algorithm.
    """
    run = _Run(build(), checkpoint_dir)
    killer = _Killer(run, schedule)
    run.t0 = time.perf_counter()
    calls = 0

    def clock() -> float:
        return calls if schedule.by_iterations else run.elapsed()

    def due(every: float | None, last: float) -> bool:
        return every is not None and clock() - last >= every

    last_kill = last_save = 0.0
    try:
        if schedule.kill_every and not schedule.by_iterations:
            killer.start()
        while clock() < schedule.length:
            run.train()
            calls += 1
            if schedule.by_iterations and due(schedule.kill_every, last_kill):
                killer.kill()
                last_kill = clock()
            if schedule.interrupt and run.report.interrupted_at is None and clock() >= schedule.length / 2:
                run.interrupt()
            elif due(schedule.checkpoint_every, last_save):
                run.save()
                last_save = clock()
        run.report.seconds, run.report.timed_env_steps = run.elapsed(), run.report.progress[-1][2]
        killer.stop()
        _settle(run)
        run.finish()
    finally:
        killer.stopped.set()
        run.algo.stop()
    return run.report


def _settle(run: _Run) -> None:
    """Trains until the last algorithm has all its workers and shards alive again (a
    restarted worker joins once its process has started, while the others sample)."""
    give_up = time.perf_counter() + SETTLE_TIMEOUT_S
    while not _all_alive(run.algo) and time.perf_counter() < give_up:
        run.train()


def _all_alive(algo: Algorithm) -> bool:
    workers = [h for _, h in algo.workers.live()]
    if len(workers) < algo.config.rollout.num_workers:
        return False
    try:
        ray.get([h.ping.remote() for h in workers + list(algo.replay.actors if algo.replay else [])], timeout=10.0)
        return True
    except ray.exceptions.RayError:
        return False
