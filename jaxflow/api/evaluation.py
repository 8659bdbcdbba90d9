"""Evaluation during training: every ``evaluation_interval`` iterations the greedy policy
plays ``evaluation_episodes`` episodes, and the next results carry what it scored under
``evaluation`` (``evaluation/episode_return_mean`` in TensorBoard, ``--stop`` and plots);
and the progress line of a long ``jaxflow evaluate``."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from jaxflow.config.constants import EVALUATION_PROGRESS_S
from jaxflow.rollout.evaluation import evaluation_seed


class PeriodicEvaluation:
    """A plan's last operator: starts an evaluation when a result passes a multiple of
    ``evaluation_interval`` (one at a time) and adds each finished one to the result it
    finishes by. A program with ``evaluate_async`` (Ray mode: an actor of its own) evaluates
    while training goes on; any other evaluates in place, into the same result.

    Each evaluation plays its own episodes (seeds apart from training's and from the other
    evaluations') and counts nothing of training's: env steps, episodes and iterations are
    unchanged. ``evaluation/training_iteration`` names the iteration whose policy played.

    Example:
        >>> results = program.results().for_each(PeriodicEvaluation(program, config))  # doctest: +SKIP
    """

    def __init__(self, program: Any, config: Any):
        self.program, self.interval, self.episodes = program, config.evaluation_interval, config.evaluation_episodes
        self.first_seed = evaluation_seed(config, None)
        self.rounds = 0
        self.last_started = 0
        self._pending: tuple[concurrent.futures.Future, dict[str, Any]] | None = None

    def __call__(self, result: dict[str, Any]) -> dict[str, Any]:
        iteration = int(result["training_iteration"])
        if self._pending is None and iteration // self.interval > self.last_started // self.interval:
            self._start(result)
        if self._pending is not None and self._pending[0].done():
            future, when = self._pending
            self._pending = None
            out = future.result()
            lengths = out.get("lengths")  # multi-agent and MAML evaluations report returns only
            result["evaluation"] = {
                "episode_return_mean": out["return_mean"],
                "episode_return_std": out["return_std"],
                **({"episode_len_mean": sum(lengths) / len(lengths)} if lengths else {}),
                "episodes": out["episodes"],
                **when,
            }
        return result

    def _start(self, result: dict[str, Any]) -> None:
        seed = self.first_seed + self.rounds * self.episodes  # every round plays new episodes
        self.rounds += 1
        self.last_started = int(result["training_iteration"])
        when = {"training_iteration": self.last_started, "env_steps_sampled": int(result["env_steps_sampled"])}
        evaluate_async = getattr(self.program, "evaluate_async", None)
        if evaluate_async is not None:
            self._pending = (evaluate_async(self.episodes, seed), when)
            return
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(self.program.evaluate(self.episodes, seed, 0))
        self._pending = (done, when)


class EvaluationProgress:
    """``jaxflow evaluate``'s progress, given to ``evaluate_policy`` as ``progress``: once the
    evaluation has played for :data:`~jaxflow.config.constants.EVALUATION_PROGRESS_S`, a line
    every as long saying how many of its ``episodes`` are done (a short evaluation says nothing).

    Example:
        >>> progress = EvaluationProgress(1000, every_s=0.0)
        >>> progress(16)  # doctest: +ELLIPSIS
        jaxflow: evaluating: 16 of 1,000 episodes played, ...s
    """

    def __init__(self, episodes: int, every_s: float = EVALUATION_PROGRESS_S):
        self.episodes, self.every_s = episodes, every_s
        self.started = self.said = time.monotonic()

    def __call__(self, played: int) -> None:
        now = time.monotonic()
        if now - self.said < self.every_s or played >= self.episodes:  # the result line says the last
            return
        self.said = now
        print(
            f"jaxflow: evaluating: {played:,} of {self.episodes:,} episodes played, {now - self.started:.0f}s",
            flush=True,
        )
