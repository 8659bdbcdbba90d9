"""Evaluation during training: every ``evaluation_interval`` iterations the greedy policy
plays ``evaluation_episodes`` episodes, and a result carries what it scored under
``evaluations`` and ``evaluation`` (``evaluation/episode_return_mean`` in TensorBoard and ``--stop``);
and the progress line of a long ``jaxflow evaluate``."""

from __future__ import annotations

import collections
import concurrent.futures
import time
from typing import Any

from jaxflow.config.constants import EVALUATION_PROGRESS_S
from jaxflow.rollout.evaluation import evaluation_seed

MAX_PENDING_EVALUATIONS = 4
"""Evaluations that may play behind training (Ray mode's evaluator actor) before a new one
waits for the oldest: every due evaluation is played and reported, so an evaluator slower than
``evaluation_interval`` iterations holds training back rather than fall ever further behind."""


class PeriodicEvaluation:
    """A plan's last operator: starts an evaluation of the current policy whenever a result
    passes a multiple of ``evaluation_interval``, every time (a result of several iterations,
    device mode's, starts one for the policy it ends with), and reports each finished one, in
    the order they were started, with the first result produced after it finished. A program
    with ``evaluate_async`` (Ray mode: an actor of its own, which plays them in order)
    evaluates while training goes on, at most :data:`MAX_PENDING_EVALUATIONS` behind; any
    other evaluates in place, into the same result. :meth:`finish` waits for the ones still
    playing, for a run's last result.

    A result reports its evaluations as ``evaluations``, a list oldest first, and the newest
    of them as ``evaluation`` (what ``--stop evaluation/...``, W&B and MLflow read; the console
    and TensorBoard show each); each names the ``training_iteration`` and ``env_steps_sampled`` of the policy it
    played. Each evaluation plays its own episodes (seeds apart from training's and from the
    other evaluations') and counts nothing of training's: env steps, episodes and iterations
    are unchanged.

    Example:
        >>> results = program.results().for_each(PeriodicEvaluation(program, config))  # doctest: +SKIP
    """

    def __init__(self, program: Any, config: Any):
        self.program, self.interval, self.episodes = program, config.evaluation_interval, config.evaluation_episodes
        self.first_seed = evaluation_seed(config, None)
        self.rounds = 0
        self._pending: collections.deque[tuple[concurrent.futures.Future, dict[str, Any]]] = collections.deque()

    def __call__(self, result: dict[str, Any]) -> dict[str, Any]:
        iteration = int(result["training_iteration"])
        # The iteration before this result's first: a restored run's first result passes no
        # multiple that its checkpoint had passed already.
        before = iteration - int(result.get("iterations_this_result", 1))
        reported = []
        if iteration // self.interval > before // self.interval:
            if len(self._pending) >= MAX_PENDING_EVALUATIONS:  # the evaluator is behind: wait for the oldest
                reported.append(self._report(*self._pending.popleft()))
            self._start(result)
        while self._pending and self._pending[0][0].done():  # in order: one not yet done holds back the later
            reported.append(self._report(*self._pending.popleft()))
        return _attach(result, reported)

    def finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` (a run's last) with every evaluation still playing waited for and reported."""
        reported = [self._report(*self._pending.popleft()) for _ in range(len(self._pending))]
        return _attach(result, reported)

    def _start(self, result: dict[str, Any]) -> None:
        seed = self.first_seed + self.rounds * self.episodes  # every round plays new episodes
        self.rounds += 1
        when = {
            "training_iteration": int(result["training_iteration"]),
            "env_steps_sampled": int(result["env_steps_sampled"]),
        }
        evaluate_async = getattr(self.program, "evaluate_async", None)
        if evaluate_async is not None:
            self._pending.append((evaluate_async(self.episodes, seed), when))
            return
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(self.program.evaluate(self.episodes, seed, 0))
        self._pending.append((done, when))

    @staticmethod
    def _report(future: concurrent.futures.Future, when: dict[str, Any]) -> dict[str, Any]:
        """A finished evaluation (waited for) as a result reports it."""
        out = future.result()
        lengths = out.get("lengths")  # multi-agent and MAML evaluations report returns only
        return {
            "episode_return_mean": out["return_mean"],
            "episode_return_std": out["return_std"],
            **({"episode_len_mean": sum(lengths) / len(lengths)} if lengths else {}),
            "episodes": out["episodes"],
            **when,
        }


def _attach(result: dict[str, Any], reported: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` with ``reported`` added after the evaluations it reports already."""
    if reported:
        result["evaluations"] = [*result.get("evaluations", ()), *reported]
        result["evaluation"] = result["evaluations"][-1]
    return result


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
