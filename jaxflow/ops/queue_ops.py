"""Queue operators: hand items to a learner thread and take its results back."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

from jaxflow.dataflow.concurrency import put
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator, Operator, from_iterator
from jaxflow.learn.thread import LearnerThread
from jaxflow.ops.metrics import Context
from jaxflow.ops.train_ops import record_update

DEQUEUE_WAIT_S = 0.5
"""How long ``Dequeue`` waits for a result before it says ``NOT_READY`` (a blocking wait, not a spin)."""


class Enqueue(Operator):
    """Hands items to a learner thread's input queue, blocking while it is full (the
    learner sets the pace); the time spent waiting is in ``info["queues"]``.

    Example:
        >>> ParallelReplay(shards, 512).for_each(Enqueue(thread))  # doctest: +SKIP
    """

    def __init__(self, thread: LearnerThread):
        self.thread = thread

    def __call__(self, item: Any, ctx: Context) -> Any:
        t0 = time.perf_counter()
        if not put(self.thread.inqueue, item, lambda: not self.thread.is_alive()):
            self.thread.check()
            raise RuntimeError("Enqueue: the learner thread has stopped.")
        waits = ctx.info.setdefault("queues", {})
        waits["enqueue_wait_s"] = waits.get("enqueue_wait_s", 0.0) + time.perf_counter() - t0
        return item


def Dequeue(thread: LearnerThread, context: Context | None = None) -> LocalIterator[Any]:
    """The learner thread's outputs ``(batch, metrics)``, counted as updates; ``NOT_READY``
    while none has arrived within ``DEQUEUE_WAIT_S``, so
    ``Concurrently`` can serve its other ops.

    Example:
        >>> Dequeue(thread).for_each(UpdatePriorities(shards))  # doctest: +SKIP
    """

    def gen() -> Iterator[Any]:
        ctx = it.context
        assert isinstance(ctx, Context)
        while not it._shared.stopped.is_set():
            t0 = time.perf_counter()
            try:
                batch, metrics = thread.get(timeout=DEQUEUE_WAIT_S)
            except queue.Empty:
                yield NOT_READY
                continue
            waits = ctx.info.setdefault("queues", {})
            waits["dequeue_wait_s"] = waits.get("dequeue_wait_s", 0.0) + time.perf_counter() - t0
            waits.update(
                learner_inqueue_size=thread.inqueue.qsize(), **{f"learner_{k}": v for k, v in thread.stats.items()}
            )
            acted = batch.weights_version
            # Optimizer steps between the weights that acted (where known) and those just trained.
            lag = {"policy_lag": thread.learner.version - acted} if acted >= 0 else {}
            record_update(ctx, metrics, batch.num_samples, **lag)
            yield batch, metrics

    it: LocalIterator[Any] = from_iterator(gen, context or Context(), name="Dequeue")
    return it
