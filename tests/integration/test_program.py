"""A toy Program, defined here, runs through Algorithm: train, checkpoint (with its own
files), restore in a new Algorithm, and continue exactly where it stopped."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pytest

from jaxflow import (
    Algorithm,
    AlgorithmSpec,
    CheckpointError,
    Context,
    ReportMetrics,
    RunHooks,
    from_iterator,
    register_algorithm,
)


@dataclasses.dataclass(frozen=True)
class CounterConfig:
    step: int = 3
    mode: str = "counter"  # a program decides its own modes


class CounterProgram:
    """Each iteration adds ``step`` to a running total (its state) and samples ``step`` env
    steps; it keeps a log of the totals in a file saved with every checkpoint."""

    def __init__(self, config: CounterConfig, spec: AlgorithmSpec, mode: str):
        assert mode == "counter"
        self.config, self.total, self.log, self.stopped = config, np.zeros((), np.int64), [], False
        self.files = self  # CheckpointFiles: settle / save / saved_at / load
        ctx = Context()

        def gen():
            while True:
                self.total = self.total + config.step
                self.log.append(int(self.total))
                ctx.counters["env_steps_sampled"] += config.step
                yield self.total

        self._results = ReportMetrics(from_iterator(gen, ctx, "counter"), None)

    def results(self):
        return self._results

    def get_state(self) -> dict[str, Any]:
        return {"total": np.asarray(self.total)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.total = np.asarray(state["total"])

    def evaluate(self, episodes: int, seed: int | None, member: int) -> dict[str, Any]:
        return {"episodes": episodes, "return_mean": float(self.total)}

    def stop(self) -> None:
        self.stopped = True

    def settle(self) -> None:
        """Nothing in flight: the log is written in the iteration."""

    def save(self, directory: str) -> None:
        with open(os.path.join(directory, "log.txt"), "w") as f:
            f.write(",".join(map(str, self.log)))

    def saved_at(self, directory: str) -> None:
        self.saved_to = directory

    def load(self, directory: str) -> None:
        with open(os.path.join(directory, "log.txt")) as f:
            self.log = [int(x) for x in f.read().split(",")]


COUNTER = register_algorithm(
    AlgorithmSpec("TOYCOUNTER", CounterConfig, loss=None, plan=None, run=RunHooks(program=CounterProgram))
)


def test_a_toy_program_trains_checkpoints_and_resumes_through_algorithm(tmp_path):
    algo = Algorithm(CounterConfig(step=3))
    assert algo.spec is COUNTER and isinstance(algo.program, CounterProgram)
    results = [algo.train() for _ in range(4)]
    assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
    assert [r["env_steps_sampled"] for r in results] == [3, 6, 9, 12]
    path = algo.save(str(tmp_path))
    assert algo.program.saved_to == path and os.path.exists(os.path.join(path, "log.txt"))
    assert algo.evaluate(episodes=2) == {"episodes": 2, "return_mean": 12.0}
    algo.stop()
    assert algo.program.stopped

    resumed = Algorithm.restore(str(tmp_path))
    assert isinstance(resumed.program, CounterProgram) and resumed.config == CounterConfig(step=3)
    assert int(resumed.program.total) == 12 and resumed.program.log == [3, 6, 9, 12]
    nxt = resumed.train()
    assert nxt["training_iteration"] == 5 and nxt["env_steps_sampled"] == 15
    assert int(resumed.program.total) == 15 and resumed.program.log[-1] == 15
    resumed.stop()


def test_a_program_of_its_own_is_checked_against_its_state_when_loaded(tmp_path):
    """No template exists before a program of its own is built: Algorithm.load compares the
    saved shapes with its get_state() before restoring, and refuses in one line."""
    algo = Algorithm(CounterConfig(step=3))
    algo.train()
    real = algo.program.get_state
    algo.program.get_state = lambda: {"total": np.zeros(2, np.int32)}  # saved as int32[2]
    path = algo.save(str(tmp_path))
    algo.program.get_state = real
    with pytest.raises(CheckpointError) as e:
        Algorithm.restore(str(tmp_path))
    assert str(e.value) == (
        f"checkpoint {path}: state does not fit this config: total: saved int32[2], expected int64[]"
    )
