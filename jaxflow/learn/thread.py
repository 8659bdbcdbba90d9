"""The learner on a thread of its own, fed and drained through bounded queues, so that the
plan's thread keeps sampling, storing and replaying while the accelerator trains (Horgan et
al., 2018, "Distributed Prioritized Experience Replay", Section 3).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jaxflow.config.constants import POLL_S, THREAD_JOIN_TIMEOUT_S
from jaxflow.dataflow.errors import carrying
from jaxflow.dataflow.producer import Producer, ProducerError
from jaxflow.rollout.batch import train_arrays

if TYPE_CHECKING:
    from jaxflow.learn.learner import Learner


class LearnerThreadError(RuntimeError):
    """The learner thread raised; the original error is the cause, and its type this error's too
    (:func:`~jaxflow.dataflow.errors.carrying`: a ``NonFiniteUpdateError`` is caught as one)."""


class LearnerThread:
    """Runs ``learner.update`` on every batch from ``inqueue``; :meth:`get` returns
    ``(batch, metrics)`` in order.

    ``to_host_batch(item)`` makes the learner's flat batch from a queued item (default: the
    batch's own ``train_arrays()``, e.g. a replayed batch plus its importance weights). The
    updates run on a :class:`~jaxflow.dataflow.producer.Producer` at most
    ``outqueue_size + 1`` results ahead of :meth:`get` (the waiting ones and the one in its
    update). Queue waits and update times are kept in :attr:`stats` (seconds, since start);
    a failure stops the thread and is raised again by whoever next waits on it.

    Example:
        >>> thread = LearnerThread(learner).start(); thread.inqueue.put(replay_batch)  # doctest: +SKIP
        >>> batch, metrics = thread.get()                                             # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner,
        to_host_batch: Callable[[Any], Mapping[str, Any]] = train_arrays,
        inqueue_size: int = 8,
        outqueue_size: int = 8,
    ):
        self.learner, self.to_host_batch = learner, to_host_batch
        self.inqueue: queue.Queue = queue.Queue(maxsize=inqueue_size)
        self.stats = {"updates": 0, "inqueue_wait_s": 0.0, "outqueue_wait_s": 0.0, "update_s": 0.0}
        self._updates: Producer[tuple[Any, dict[str, Any]]] = Producer(self._train, outqueue_size + 1, "learner-thread")

    def start(self) -> LearnerThread:
        self._updates.start()
        return self

    def is_alive(self) -> bool:
        return self._updates.thread.is_alive()

    def get(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The next ``(batch, metrics)``; ``queue.Empty`` if none within ``timeout`` seconds."""
        try:
            return self._updates.get(timeout)
        except ProducerError as e:
            raise carrying(LearnerThreadError, f"the learner thread failed: {e.error!r}", e.error) from e.error

    def check(self) -> None:
        """Raises :class:`LearnerThreadError` if the thread failed."""
        if self._updates.error is not None:
            error = self._updates.error
            raise carrying(LearnerThreadError, f"the learner thread failed: {error!r}", error) from error

    def stop(self, timeout_s: float = THREAD_JOIN_TIMEOUT_S) -> None:
        self._updates.close(timeout_s)

    def _train(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        while not self._updates.stopping():
            t0 = time.perf_counter()
            try:
                item = self.inqueue.get(timeout=POLL_S)
            except queue.Empty:
                self.stats["inqueue_wait_s"] += time.perf_counter() - t0
                continue
            t1 = time.perf_counter()
            metrics = self.learner.update(self.to_host_batch(item))
            t2 = time.perf_counter()
            self.stats["inqueue_wait_s"] += t1 - t0
            self.stats["update_s"] += t2 - t1
            self.stats["updates"] += 1
            yield item, metrics
            # Resumed once the consumer made room for another result: the time results waited.
            self.stats["outqueue_wait_s"] += time.perf_counter() - t2
