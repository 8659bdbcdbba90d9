"""The dataflow layer: lazy, pull-based iterators over local items and Ray actors.

After RLlib Flow (Liang et al., "RLlib Flow: Distributed Reinforcement Learning is
a Dataflow Problem", NeurIPS 2021). A plan is a chain of these iterators; nothing
runs until the plan's output is pulled.

* :class:`LocalIterator` -- a stream in the driver: ``for_each``, ``filter``,
  ``combine``, ``batch``, ``flatten``, ``duplicate``, ``union``.

:class:`~jaxflow.dataflow.actors.ParallelIterator` (one stream per actor) and
:func:`~jaxflow.dataflow.concurrency.Concurrently` build on these.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

from jaxflow.config.constants import THREAD_JOIN_TIMEOUT_S
from jaxflow.dataflow.context import FlowContext

T = TypeVar("T")


U = TypeVar("U")
_IterableT = TypeVar("_IterableT", bound=Iterable[Any])
"""The item type of an iterator that :meth:`LocalIterator.flatten` can flatten."""


class _NotReady:
    """Yielded by a branch that may not run ahead; consumers move on to another branch."""

    def __repr__(self) -> str:
        return "NOT_READY"


NOT_READY = _NotReady()


class BackpressureError(RuntimeError):
    """A duplicated branch was pulled while a sibling branch was too far behind."""


class Operator:
    """Base of operators that read or update the plan's shared :class:`~jaxflow.dataflow.context.FlowContext`.

    The iterators call an ``Operator`` as ``op(item, ctx)``; any other callable as
    ``fn(item)``. On the actor side (``par_for_each``) ``ctx`` is the actor itself.
    """

    def __call__(self, item: Any, ctx: Any) -> Any:
        raise NotImplementedError


def _call(fn: Callable[..., Any], item: Any, ctx: Any) -> Any:
    return fn(item, ctx) if isinstance(fn, Operator) else fn(item)


class _Shared:
    """The box shared by every iterator derived from one source, so that ``Concurrently``
    can point all of them at one merged context and one stop signal."""

    __slots__ = ("context", "stopped", "threads")

    def __init__(self, context: FlowContext):
        self.context = context
        self.stopped = threading.Event()
        """Set by :meth:`LocalIterator.stop`: background threads of the plan wind down."""
        self.threads: list[threading.Thread] = []
        """The plan's background threads, for :meth:`LocalIterator.join`."""


class LocalIterator(Generic[T]):
    """A lazy stream of items in the driver process.

    Example:
        >>> it = from_items([1, 2, 3, 4]).for_each(lambda x: x * 10).filter(lambda x: x > 10)
        >>> it.take(2)
        [20, 30]
    """

    def __init__(self, make_gen: Callable[[], Iterator[T | _NotReady]], shared: _Shared, name: str = "LocalIterator"):
        self._make_gen = make_gen
        self._gen: Iterator[T | _NotReady] | None = None
        self._shared = shared
        self.name = name

    @property
    def context(self) -> FlowContext:
        return self._shared.context

    def _pull(self) -> T | _NotReady:
        if self._gen is None:
            self._gen = self._make_gen()
        return next(self._gen)

    def _items(self) -> Iterator[T | _NotReady]:
        while True:
            try:
                yield self._pull()
            except StopIteration:
                return

    def __iter__(self) -> LocalIterator[T]:
        return self

    def __next__(self) -> T:
        item = self._pull()
        if isinstance(item, _NotReady):  # NOT_READY, the only instance
            raise BackpressureError(
                f"{self.name}: a branch made by duplicate() ran too far ahead of its siblings; "
                "consume every branch, e.g. with Concurrently([...])."
            )
        return item

    def stop(self) -> None:
        """Tells every background thread of this plan (``Concurrently``'s, ``ToDevice``'s,
        gathers from actors) to stop at its next check, e.g. before its actors are killed."""
        self._shared.stopped.set()

    def join(self, timeout_s: float = THREAD_JOIN_TIMEOUT_S) -> bool:
        """Waits until the plan's background threads have ended (after :meth:`stop`, and once
        calls to actors that were killed have returned); True if they all did in time.
        Shutting Ray down under a thread still inside a Ray call would end the process."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._shared.threads):
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._shared.threads)

    def _derive(self, gen: Callable[[], Iterator[U | _NotReady]], name: str) -> LocalIterator[U]:
        return LocalIterator(gen, self._shared, f"{self.name}.{name}")

    @overload
    def for_each(self, fn: Operator) -> LocalIterator[Any]: ...
    @overload
    def for_each(self, fn: Callable[[T], U]) -> LocalIterator[U]: ...
    def for_each(self, fn: Callable[[T], U] | Operator) -> LocalIterator[Any]:
        """Applies ``fn`` to every item (an :class:`Operator` also gets the context)."""

        def gen() -> Iterator[U | _NotReady]:
            for item in self._items():
                yield item if isinstance(item, _NotReady) else _call(fn, item, self.context)

        return self._derive(gen, f"for_each({_name(fn)})")

    def filter(self, pred: Callable[[T], bool] | Operator) -> LocalIterator[T]:
        def gen() -> Iterator[T | _NotReady]:
            for item in self._items():
                if item is NOT_READY or _call(pred, item, self.context):
                    yield item

        return self._derive(gen, f"filter({_name(pred)})")

    @overload
    def combine(self, fn: Operator) -> LocalIterator[Any]: ...
    @overload
    def combine(self, fn: Callable[[T], Iterable[U]]) -> LocalIterator[U]: ...
    def combine(self, fn: Callable[[T], Iterable[U]] | Operator) -> LocalIterator[Any]:
        """Applies ``fn`` returning a list per item (possibly empty) and yields its elements."""

        def gen() -> Iterator[U | _NotReady]:
            for item in self._items():
                if isinstance(item, _NotReady):
                    yield item
                    continue
                yield from _call(fn, item, self.context)

        return self._derive(gen, f"combine({_name(fn)})")

    def batch(self, n: int) -> LocalIterator[list[T]]:
        def gen() -> Iterator[list[T] | _NotReady]:
            buf: list[T] = []
            for item in self._items():
                if isinstance(item, _NotReady):
                    yield item
                    continue
                buf.append(item)
                if len(buf) >= n:
                    yield buf
                    buf = []

        return self._derive(gen, f"batch({n})")

    def flatten(self: LocalIterator[_IterableT]) -> LocalIterator[Any]:
        return self.combine(lambda items: items)

    def take(self, n: int) -> list[T]:
        return [next(self) for _ in range(n)]

    def union(self, *others: LocalIterator[T], weights: Sequence[float | str] | None = None) -> LocalIterator[T]:
        """Round-robin merge with ``others`` (see :func:`Concurrently`)."""
        from jaxflow.dataflow.concurrency import Concurrently  # which builds on this module

        return Concurrently([self, *others], mode="round_robin", round_robin_weights=weights)

    def duplicate(self, n: int, max_buffer: int = 32) -> list[LocalIterator[T]]:
        """Splits this stream into ``n`` branches that each see every item.

        A branch may run at most ``max_buffer`` items ahead of the slowest one; past
        that it yields ``NOT_READY`` (which ``Concurrently`` skips) instead of
        buffering without bound.
        """
        buffers: list[collections.deque] = [collections.deque() for _ in range(n)]
        lock = threading.Lock()
        ended = [False]

        def branch(i: int) -> Callable[[], Iterator[T | _NotReady]]:
            def gen() -> Iterator[T | _NotReady]:
                while True:
                    with lock:
                        if buffers[i]:
                            item = buffers[i].popleft()
                        elif ended[0]:
                            return
                        elif any(len(b) >= max_buffer for j, b in enumerate(buffers) if j != i):
                            item = NOT_READY
                        else:
                            try:
                                item = self._pull()
                            except StopIteration:
                                ended[0] = True
                                return
                            if item is not NOT_READY:
                                for j, b in enumerate(buffers):
                                    if j != i:
                                        b.append(item)
                    yield item

            return gen

        return [LocalIterator(branch(i), self._shared, f"{self.name}.duplicate[{i}]") for i in range(n)]


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def from_items(items: Iterable[T], context: FlowContext | None = None) -> LocalIterator[T]:
    """A local iterator over ``items``; ``from_items(itertools.count())`` is endless."""
    return LocalIterator(lambda: iter(items), _Shared(context or FlowContext()), "from_items")


def from_iterator(
    make: Callable[[], Iterator[T | _NotReady]], context: FlowContext | None = None, name: str = "source"
) -> LocalIterator[T]:
    """A local iterator over a generator made by ``make()`` on the first pull."""
    return LocalIterator(make, _Shared(context or FlowContext()), name)
