"""The learner on a thread of its own, fed and drained through bounded queues, so that the
plan's thread keeps sampling, storing and replaying while the accelerator trains (Horgan et
al., 2018, "Distributed Prioritized Experience Replay", Section 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxflow.config.constants import POLL_S
from jaxflow.dataflow.concurrency import put

if TYPE_CHECKING:
    from jaxflow.learn.learner import Learner

import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class LearnerThreadError(RuntimeError):
    """The learner thread raised; the original error is the cause."""


class LearnerThread(threading.Thread):
    """Runs ``learner.update`` on every batch from ``inqueue`` and puts ``(batch, metrics)``
    on ``outqueue``.

    ``to_host_batch(item) -> dict`` makes the learner's flat batch from a queued item
    (e.g. a replayed batch plus its importance weights). Queue waits and update times
    are kept in :attr:`stats` (seconds, since start); a failure stops the thread and is
    raised again by whoever next waits on its queues.

    Example:
        >>> thread = LearnerThread(learner, lambda b: dict(b.data, weights=b.weights))  # doctest: +SKIP
        >>> thread.start(); thread.inqueue.put(replay_batch)                         # doctest: +SKIP
        >>> batch, metrics = thread.outqueue.get()                                   # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner,
        to_host_batch: Callable[[Any], dict[str, Any]],
        inqueue_size: int = 8,
        outqueue_size: int = 8,
    ):
        super().__init__(daemon=True, name="learner-thread")
        self.learner, self.to_host_batch = learner, to_host_batch
        self.inqueue: queue.Queue = queue.Queue(maxsize=inqueue_size)
        self.outqueue: queue.Queue = queue.Queue(maxsize=outqueue_size)
        self.stats = {"updates": 0, "inqueue_wait_s": 0.0, "outqueue_wait_s": 0.0, "update_s": 0.0}
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                t0 = time.perf_counter()
                try:
                    item = self.inqueue.get(timeout=POLL_S)
                except queue.Empty:
                    self.stats["inqueue_wait_s"] += time.perf_counter() - t0
                    continue
                t1 = time.perf_counter()
                metrics = self.learner.update(self.to_host_batch(item))
                t2 = time.perf_counter()
                if not put(self.outqueue, (item, metrics), self._stop_event.is_set):
                    return
                self.stats["inqueue_wait_s"] += t1 - t0
                self.stats["update_s"] += t2 - t1
                self.stats["outqueue_wait_s"] += time.perf_counter() - t2
                self.stats["updates"] += 1
        except BaseException as e:  # re-raised in the plan's thread by Enqueue/Dequeue
            self.error = e

    def check(self) -> None:
        """Raises :class:`LearnerThreadError` if the thread failed."""
        if self.error is not None:
            raise LearnerThreadError(f"the learner thread failed: {self.error!r}") from self.error

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)
