"""ES in Ray mode when a SearchWorker dies, is killed in the middle of its call or stops
answering (real local Ray, real actors killed with ``ray.kill``): with
``on_worker_failure="restart"`` or ``"ignore"`` the run goes on and every generation's update
is the fault-free run's bit for bit (its failed shares played again by live workers, to the
same returns); with ``"raise"`` (the default) one line names the worker."""

from __future__ import annotations

import hashlib
import threading
import time

import jax
import numpy as np
import pytest
import ray

from jaxflow import Algorithm, WorkerCrashedError

GENERATIONS = 4
WORKERS = 2
RUN = dict(
    env="test/HoldCall-v0",
    population_size=2 * WORKERS,  # one pair a worker
    num_workers=WORKERS,
    num_cpus_per_worker=0.5,  # two runs at once (the fault-free one stays up) on the session's two CPUs
    noise_table_size=100_000,
    hidden_sizes=(4,),
    max_episode_length=20,
    normalize_observations=True,  # the observation moments travel and merge too
    seed=3,
)
SILENT_TIMEOUT_S = 5.0
"""How long the ignore run waits for a call (a silent worker's, and a first call compiling)."""
REJOIN_S = 120.0
"""How long a test waits for restarted workers (new processes importing JAX) to join."""


def build(mode: str, env_config: dict | None = None, **overrides) -> Algorithm:
    return Algorithm.build("ES", on_worker_failure=mode, env_config=env_config or {}, **RUN, **overrides)


def digest(algo: Algorithm) -> str:
    """SHA-256 of every array of the search state: theta, Adam's state, the key, the moments."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(algo.program.get_state()):
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()


def worker(algo: Algorithm, index: int):
    return dict(algo.program.workers.live())[index]


@pytest.fixture(scope="module")
def fault_free(ray_local):
    """A run without faults (``on_worker_failure`` left at "raise"), and its state's digest after each generation."""
    algo = build("raise")
    try:
        digests = []
        for _ in range(GENERATIONS):
            algo.train()
            digests.append(digest(algo))
        yield algo, digests
    finally:
        algo.stop()


def kill_when_held(handle, marker, deadline_s: float) -> None:
    """Kills ``handle`` once its env says it holds the call open (the marker file exists)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            open(marker).close()
        except FileNotFoundError:
            time.sleep(0.05)
            continue
        ray.kill(handle, no_restart=True)
        return


def test_restart_replaces_dead_and_held_workers_and_keeps_every_update(fault_free, tmp_path):
    _, expected = fault_free
    marker = tmp_path / "held"
    # Worker 0 is killed between generations 1 and 2; worker 1 holds its call of generation 2
    # open until the killer thread kills it in there: no worker is left, and the generation
    # waits for a restarted one to play both shares.
    algo = build("restart", dict(hold_worker=1, hold_at_reset=2, marker=str(marker)))
    try:
        killer = threading.Thread(target=kill_when_held, args=(worker(algo, 1), marker, REJOIN_S))
        killer.start()
        first = algo.train()
        ray.kill(worker(algo, 0), no_restart=True)
        for _ in range(GENERATIONS - 2):
            algo.train()
        killer.join()
        assert marker.exists()  # worker 1 did hold a call open, and was killed in it
        deadline = time.monotonic() + REJOIN_S
        while algo.program.workers.num_healthy < WORKERS and time.monotonic() < deadline:
            time.sleep(0.1)
            algo.program.workers.live()  # admits the replacements that answer
        last = algo.train()  # each replacement plays a share
        assert digest(algo) == expected[-1]
    finally:
        algo.stop()
    assert first["num_worker_restarts"] == 0
    assert last["num_worker_restarts"] == 2 and last["num_healthy_workers"] == WORKERS
    assert last["training_iteration"] == GENERATIONS and last["num_updates"] == GENERATIONS


def test_ignore_drops_a_silent_worker_and_keeps_every_update(fault_free, tmp_path):
    _, expected = fault_free
    marker = tmp_path / "held"
    # Worker 1 stops answering in generation 2; after worker_timeout_s it is dropped.
    held = dict(hold_worker=1, hold_at_reset=2, marker=str(marker))
    algo = build("ignore", held, worker_timeout_s=SILENT_TIMEOUT_S)
    try:
        digests = []
        for _ in range(GENERATIONS):
            result = algo.train()  # from generation 2 worker 0 plays both shares
            digests.append(digest(algo))
        assert marker.exists() and digests == expected
        assert result["num_healthy_workers"] == WORKERS - 1 and result["num_worker_restarts"] == 0
        for _, handle in algo.program.workers.live():
            ray.kill(handle, no_restart=True)
        with pytest.raises(WorkerCrashedError, match="every rollout worker has failed") as e:
            algo.train()
        assert "\n" not in str(e.value)
    finally:
        algo.stop()


def test_raise_names_the_worker_in_one_line(fault_free):
    algo, _ = fault_free
    ray.kill(worker(algo, 1), no_restart=True)
    with pytest.raises(WorkerCrashedError, match=r"rollout worker 1 died or stopped answering") as e:
        algo.train()
    assert "\n" not in str(e.value) and "on_worker_failure='restart'" in str(e.value)
