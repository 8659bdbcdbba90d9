"""The last operator of every plan: a stream of training steps becomes one result dict per
training iteration.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from jaxflow.config.constants import (
    ENV_STEPS_SAMPLED,
    ENV_STEPS_TRAINED,
    NUM_UPDATES,
    NUM_WEIGHT_SYNCS,
    TRAINING_ITERATION,
)
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.ops.metrics import Context
from jaxflow.rollout.episode_hooks import CUSTOM_METRICS
from jaxflow.rollout.worker_set import WorkerSet


def ReportMetrics(
    train: LocalIterator[Any],
    workers: WorkerSet | None,
    min_env_steps_per_iteration: int = 0,
    iterations_per_item: int = 1,
) -> LocalIterator[dict[str, Any]]:
    """Turns a stream of training steps into one result dict per training iteration.

    An iteration pulls at least one item and at least ``min_env_steps_per_iteration``
    sampled env steps. A stream whose every item is several iterations already (device
    mode's compiled call of ``iterations_per_call`` rollouts and updates) says so with
    ``iterations_per_item``: ``training_iteration`` then still counts rollout-and-update
    iterations, so ``--stop training_iteration=N`` means the same in every kind of run, and
    ``iterations_this_result`` says how many one result holds. ``time_s`` is wall time since
    training began, carried across resumes through the context's ``time_s`` counter.

    Example:
        >>> results = ReportMetrics(train_op, workers)  # doctest: +SKIP
        >>> next(results)["episode_return_mean"]       # doctest: +SKIP
    """

    ctx = train.context
    if not isinstance(ctx, Context):
        raise TypeError(f"ReportMetrics needs a plan whose context is a Context (episodes), got {type(ctx).__name__}")

    def gen() -> Iterator[dict[str, Any]]:
        clock, time_base = time.monotonic(), ctx.counters["time_s"]
        while True:
            t0, s0 = time.monotonic(), ctx.counters[ENV_STEPS_SAMPLED]
            next(train)
            items = 1
            while ctx.counters[ENV_STEPS_SAMPLED] - s0 < min_env_steps_per_iteration:
                next(train)
                items += 1
            now = time.monotonic()
            iterations = 1 if iterations_per_item == 1 else items * iterations_per_item
            ctx.counters[TRAINING_ITERATION] += iterations
            ctx.counters["time_s"] = time_base + (now - clock)  # type: ignore[assignment]  # a Counter of numbers
            yield dict(
                results(ctx, workers, ctx.counters[ENV_STEPS_SAMPLED] - s0, now - t0), iterations_this_result=iterations
            )

    return LocalIterator(gen, train._shared, "ReportMetrics")


def results(ctx: Context, workers: WorkerSet | None, steps_this_iter: int, seconds_this_iter: float) -> dict[str, Any]:
    """The standard result dict (DESIGN.md) from a plan's context (``workers`` is None in
    device mode, which has no rollout workers)."""
    c = ctx.counters
    out = {
        TRAINING_ITERATION: int(c[TRAINING_ITERATION]),
        ENV_STEPS_SAMPLED: int(c[ENV_STEPS_SAMPLED]),
        ENV_STEPS_TRAINED: int(c[ENV_STEPS_TRAINED]),
        **ctx.episode_stats(),
        "env_steps_per_s": steps_this_iter / max(seconds_this_iter, 1e-9),
        "time_s": float(c["time_s"]),
        "time_this_iter_s": seconds_this_iter,
        NUM_UPDATES: int(c[NUM_UPDATES]),
        NUM_WEIGHT_SYNCS: int(c[NUM_WEIGHT_SYNCS]),
        "num_worker_restarts": workers.num_restarts if workers is not None else 0,
        "num_healthy_workers": workers.num_healthy if workers is not None else 0,
        "learner": dict(ctx.info.get("learner", {})),
        # Whatever else the plan's operators report: learner queues, device feeding.
        **{k: dict(v) for k, v in ctx.info.items() if k != "learner"},
    }
    if ctx.member_names:
        out["members"] = ctx.member_results()
    custom = ctx.pop_custom_metrics()
    if custom:  # what on_episode_end callbacks returned, over the episodes that ended since the last result
        out[CUSTOM_METRICS] = custom
    return out
