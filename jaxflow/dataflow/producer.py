"""One way to run a stream on a background thread: :class:`Producer`.

The plan overlaps work in four places: ``ToDevice`` builds and transfers the next batches
while the learner trains, a ``LearnerThread`` trains while the plan samples, an asynchronous
``Concurrently`` pulls each of its ops on a thread, and a rollout worker with
``sample_async`` steps its next fragment while the last one is postprocessed. All four are a
thread running an iterator a bounded number of items ahead of one consumer, handing its
items, its end or its error over, and giving up when the consumer has gone. That is what a
``Producer`` does, so each of them is only the stream it runs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, NamedTuple, TypeVar

from jaxflow.config.constants import POLL_S

T = TypeVar("T")


class ProducerError(RuntimeError):
    """The producer's stream raised ``error`` (also the cause)."""

    def __init__(self, message: str, error: BaseException):
        super().__init__(message)
        self.error = error


class _Handover(NamedTuple):
    producer: Producer[Any]
    kind: str  # "item", "end" or "error"
    payload: Any


_ITEM, _END, _ERROR = "item", "end", "error"


class Producer(Generic[T]):
    """Runs ``stream()`` on a daemon thread, at most ``ahead`` items ahead of its consumer.

    The thread takes a permit before it computes each item and the consumer returns one
    with every item it takes, so at most ``ahead`` items are computed and not yet taken,
    the one in progress included (``ahead=1``: the next item is computed while the consumer
    works on this one, never two). The stream's end and its error reach the consumer in
    order after the items before them: :meth:`get` raises ``StopIteration`` at the end, and
    :class:`ProducerError` (with the stream's error as cause) for a failure, again on every
    later call. The thread gives up between items once :meth:`close` is called or
    ``stopped()`` turns true. Producers may share one ``out`` queue; :func:`merged` then
    takes their items in completion order.

    Example:
        >>> squares = Producer(lambda: (i * i for i in range(3)), ahead=2, name="squares").start()
        >>> [squares.get() for _ in range(3)]
        [0, 1, 4]
    """

    def __init__(
        self,
        stream: Callable[[], Iterable[T]],
        ahead: int,
        name: str,
        stopped: Callable[[], bool] = lambda: False,
        out: queue.Queue | None = None,
    ):
        if ahead < 1:
            raise ValueError(f"Producer {name!r}: ahead must be >= 1, got {ahead}.")
        self._stream, self._stopped = stream, stopped
        self._permits = threading.Semaphore(ahead)
        self._closed = threading.Event()
        self._final: _Handover | None = None  # the stream's end or error, once taken
        self.error: BaseException | None = None
        """The stream's error, once it raised."""
        self.out: queue.Queue = queue.Queue() if out is None else out
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> Producer[T]:
        self.thread.start()
        return self

    @property
    def started(self) -> bool:
        return self.thread.ident is not None

    def stopping(self) -> bool:
        """True once the consumer closed this producer or ``stopped()`` turned true."""
        return self._closed.is_set() or self._stopped()

    def get(self, timeout: float | None = None) -> T:
        """The next item; ``queue.Empty`` if none arrives within ``timeout`` seconds."""
        if self._final is not None:
            return self.take(self._final)
        return self.take(self.out.get(timeout=timeout))

    def take(self, handover: _Handover) -> T:
        """The item in ``handover`` (from this producer's queue), returning its permit."""
        if handover.kind == _ITEM:
            self._permits.release()
            return handover.payload
        self._final = handover  # an end or an error answers every later call too
        if handover.kind == _END:
            raise StopIteration
        raise ProducerError(f"{self.thread.name}: {handover.payload!r}", handover.payload) from handover.payload

    def close(self, timeout_s: float = 0.0) -> None:
        """Tells the thread to stop after the item in progress; waits up to ``timeout_s`` for it."""
        self._closed.set()
        self._permits.release()  # wakes a thread waiting for a permit, so it sees the close
        if self.started and timeout_s > 0:
            self.thread.join(timeout_s)

    def _acquire(self) -> bool:
        while not self.stopping():
            if self._permits.acquire(timeout=POLL_S):
                return not self.stopping()
        return False

    def _run(self) -> None:
        try:
            items: Iterator[T] = iter(self._stream())
            while self._acquire():
                try:
                    item = next(items)
                except StopIteration:
                    break
                self.out.put(_Handover(self, _ITEM, item))
            # Ended or stopped: either way a consumer waiting in get() must wake up.
            self.out.put(_Handover(self, _END, None))
        except BaseException as e:  # handed to the consumer, which raises it
            self.error = e
            self.out.put(_Handover(self, _ERROR, e))


def merged(producers: list[Producer[T]]) -> Iterator[T]:
    """The items of producers that share one ``out`` queue, in completion order, until all
    have ended; a producer's error is raised as :class:`ProducerError`. Closes them when the
    consumer stops early."""
    out = producers[0].out
    running = len(producers)
    try:
        while running:
            handover = out.get()
            try:
                yield handover.producer.take(handover)
            except StopIteration:
                running -= 1
    finally:
        for p in producers:
            p.close()
