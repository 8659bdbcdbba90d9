"""The dataflow layer: lazy, pull-based iterators over local items and Ray actors.

After RLlib Flow (Liang et al., "RLlib Flow: Distributed Reinforcement Learning is
a Dataflow Problem", NeurIPS 2021). A plan is a chain of these iterators; nothing
runs until the plan's output is pulled.

* :class:`LocalIterator` -- a stream in the driver: ``for_each``, ``filter``,
  ``combine``, ``batch``, ``flatten``, ``duplicate``, ``union``.
* :class:`ParallelIterator` -- one stream per actor: ``par_for_each`` runs a
  function on the actor side; ``gather_sync`` / ``gather_async`` bring the items
  to the driver.
* :func:`Concurrently` -- runs several iterators round-robin or in threads.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, Callable, Generic, Iterable, Iterator, Protocol, Sequence, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from jaxflow.metrics import Context

T = TypeVar("T")
U = TypeVar("U")


class _NotReady:
    """Yielded by a branch that may not run ahead; consumers move on to another branch."""

    def __repr__(self) -> str:
        return "NOT_READY"


NOT_READY = _NotReady()


class BackpressureError(RuntimeError):
    """A duplicated branch was pulled while a sibling branch was too far behind."""


class Operator:
    """Base of operators that read or update the plan's metrics :class:`Context`.

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

    def __init__(self, context: Context):
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

    def __init__(self, make_gen: Callable[[], Iterator[T]], shared: _Shared, name: str = "LocalIterator"):
        self._make_gen = make_gen
        self._gen: Iterator[T] | None = None
        self._shared = shared
        self.name = name

    @property
    def context(self) -> Context:
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

    def __iter__(self) -> "LocalIterator[T]":
        return self

    def __next__(self) -> T:
        item = self._pull()
        if item is NOT_READY:
            raise BackpressureError(
                f"{self.name}: a branch made by duplicate() ran too far ahead of its siblings; "
                "consume every branch, e.g. with Concurrently([...])."
            )
        return item  # type: ignore[return-value]

    def stop(self) -> None:
        """Tells every background thread of this plan (``Concurrently``'s, ``ToDevice``'s,
        gathers from actors) to stop at its next check, e.g. before its actors are killed."""
        self._shared.stopped.set()

    def join(self, timeout_s: float = 30.0) -> bool:
        """Waits until the plan's background threads have ended (after :meth:`stop`, and once
        calls to actors that were killed have returned); True if they all did in time.
        Shutting Ray down under a thread still inside a Ray call would end the process."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._shared.threads):
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._shared.threads)

    def _derive(self, gen: Callable[[], Iterator[U]], name: str) -> "LocalIterator[U]":
        return LocalIterator(gen, self._shared, f"{self.name}.{name}")

    def for_each(self, fn: Callable[[T], U]) -> "LocalIterator[U]":
        """Applies ``fn`` to every item (an :class:`Operator` also gets the context)."""

        def gen() -> Iterator[U]:
            for item in self._items():
                yield item if item is NOT_READY else _call(fn, item, self.context)

        return self._derive(gen, f"for_each({_name(fn)})")

    def filter(self, pred: Callable[[T], bool]) -> "LocalIterator[T]":
        def gen() -> Iterator[T]:
            for item in self._items():
                if item is NOT_READY or _call(pred, item, self.context):
                    yield item

        return self._derive(gen, f"filter({_name(pred)})")

    def combine(self, fn: Callable[[T], Iterable[U]]) -> "LocalIterator[U]":
        """Applies ``fn`` returning a list per item (possibly empty) and yields its elements."""

        def gen() -> Iterator[U]:
            for item in self._items():
                if item is NOT_READY:
                    yield item
                    continue
                yield from _call(fn, item, self.context)

        return self._derive(gen, f"combine({_name(fn)})")

    def batch(self, n: int) -> "LocalIterator[list[T]]":
        def gen() -> Iterator[list[T]]:
            buf: list[T] = []
            for item in self._items():
                if item is NOT_READY:
                    yield item
                    continue
                buf.append(item)
                if len(buf) >= n:
                    yield buf
                    buf = []

        return self._derive(gen, f"batch({n})")

    def flatten(self) -> "LocalIterator[Any]":
        return self.combine(lambda items: items)

    def take(self, n: int) -> list[T]:
        return [next(self) for _ in range(n)]

    def union(self, *others: "LocalIterator[T]", weights: Sequence[float | str] | None = None) -> "LocalIterator[T]":
        """Round-robin merge with ``others`` (see :func:`Concurrently`)."""
        return Concurrently([self, *others], mode="round_robin", round_robin_weights=weights)

    def duplicate(self, n: int, max_buffer: int = 32) -> list["LocalIterator[T]"]:
        """Splits this stream into ``n`` branches that each see every item.

        A branch may run at most ``max_buffer`` items ahead of the slowest one; past
        that it yields ``NOT_READY`` (which ``Concurrently`` skips) instead of
        buffering without bound.
        """
        buffers: list[collections.deque] = [collections.deque() for _ in range(n)]
        lock = threading.Lock()
        ended = [False]

        def branch(i: int) -> Callable[[], Iterator[T]]:
            def gen() -> Iterator[T]:
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


def from_items(items: Iterable[T], context: Context | None = None) -> LocalIterator[T]:
    """A local iterator over ``items``; ``from_items(itertools.count())`` is endless."""
    return LocalIterator(lambda: iter(items), _Shared(context or Context()), "from_items")


def from_iterator(make: Callable[[], Iterator[T]], context: Context | None = None, name: str = "source") -> LocalIterator[T]:
    """A local iterator over a generator made by ``make()`` on the first pull."""
    return LocalIterator(make, _Shared(context or Context()), name)


def Concurrently(
    ops: Sequence[LocalIterator[Any]],
    mode: str = "round_robin",
    output_indexes: Sequence[int] | None = None,
    round_robin_weights: Sequence[float | str] | None = None,
) -> LocalIterator[Any]:
    """Runs several iterators together and yields the outputs of ``output_indexes``.

    ``mode="round_robin"`` pulls ``weights[i]`` items from op ``i`` per round
    (``"*"`` pulls until it is not ready); ``mode="async"`` pulls every op in its
    own thread and yields in completion order. The ops' contexts are merged, so
    the plan has one set of metrics.

    Example:
        >>> a, b = from_items([1, 2, 3]), from_items(["x", "y", "z"])
        >>> Concurrently([a, b], mode="round_robin").take(4)
        [1, 'x', 2, 'y']
    """
    if mode not in ("round_robin", "async"):
        raise ValueError(f"Concurrently: mode must be 'round_robin' or 'async', got {mode!r}")
    ops = list(ops)
    outputs = set(range(len(ops)) if output_indexes is None else output_indexes)
    weights = list(round_robin_weights or [1] * len(ops))
    if len(weights) != len(ops):
        raise ValueError("Concurrently: round_robin_weights needs one weight per op")
    shared = ops[0]._shared
    for op in ops[1:]:
        if op._shared.context is not shared.context:
            op._shared.context.merge_into(shared.context)
            op._shared.context = shared.context
        op._shared.stopped = shared.stopped
        if op._shared.threads is not shared.threads:
            shared.threads.extend(op._shared.threads)
            op._shared.threads = shared.threads

    def round_robin() -> Iterator[Any]:
        alive = [True] * len(ops)
        while any(alive):
            progressed = False
            for i, op in enumerate(ops):
                if not alive[i]:
                    continue
                n = weights[i]
                pulled = 0
                while n == "*" or pulled < n:
                    try:
                        item = op._pull()
                    except StopIteration:
                        alive[i] = False
                        break
                    if item is NOT_READY:
                        break
                    pulled += 1
                    progressed = True
                    if i in outputs:
                        yield item
            if not progressed and any(alive):
                yield NOT_READY

    def concurrent() -> Iterator[Any]:
        out: queue.Queue = queue.Queue(maxsize=2 * len(ops))
        stop = threading.Event()
        done = object()

        def put(item: Any) -> bool:
            # Time out now and then so a producer ends once the consumer has gone away.
            while not (stop.is_set() or shared.stopped.is_set()):
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def run(i: int, op: LocalIterator[Any]) -> None:
            try:
                for item in op._items():
                    if stop.is_set() or shared.stopped.is_set():
                        return
                    if item is NOT_READY:
                        time.sleep(1e-3)  # a duplicate() sibling must catch up first
                        continue
                    if i in outputs and not put(item):
                        return
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
                put(_Failure(e))
            else:
                put(done)

        threads = [threading.Thread(target=run, args=(i, op), daemon=True, name=f"Concurrently[{i}]") for i, op in enumerate(ops)]
        shared.threads.extend(threads)
        for t in threads:
            t.start()
        running = len(threads)
        try:
            while running:
                item = out.get()
                if item is done:
                    running -= 1
                elif isinstance(item, _Failure):
                    raise item.error
                else:
                    yield item
        finally:
            stop.set()

    return LocalIterator(round_robin if mode == "round_robin" else concurrent, shared, f"Concurrently[{mode}]")


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class ActorSource(Protocol):
    """The actors behind a :class:`ParallelIterator` and what to do when one fails."""

    timeout_s: float

    def live(self) -> list[tuple[int, Any]]:
        """``(index, handle)`` of every actor currently in service."""

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        """Starts ``method`` on the actor, then ``fns`` on its result, actor side."""

    def on_failure(self, index: int, error: BaseException) -> None:
        """Raises, drops the actor, or replaces it (see ``on_worker_failure``)."""


class WorkerError(RuntimeError):
    """An exception raised by code running inside an actor, with the actor named."""


class ParallelIterator(Generic[T]):
    """One stream per actor; items are produced on the actors and gathered lazily.

    Example:
        >>> grads = ParallelRollouts(workers, mode="raw").par_for_each(ComputeGradients())
        >>> first = next(grads.gather_async(num_async=1))  # doctest: +SKIP
    """

    def __init__(self, source: ActorSource, method: str, context: Context | _Shared, fns: tuple[Callable[..., Any], ...] = (), name: str = "ParallelIterator"):
        self.source, self.method, self.fns, self.name = source, method, fns, name
        self._shared = context if isinstance(context, _Shared) else _Shared(context)

    @property
    def context(self) -> Context:
        return self._shared.context

    def par_for_each(self, fn: Callable[[T], U]) -> "ParallelIterator[U]":
        """Applies ``fn`` on the actor side to each item (an Operator gets the actor as ``ctx``)."""
        return ParallelIterator(self.source, self.method, self._shared, self.fns + (fn,), f"{self.name}.par_for_each({_name(fn)})")

    def batch_across_shards(self) -> LocalIterator[list[T]]:
        """Each pull asks every live actor for one item and returns the list, in actor order."""

        def gen() -> Iterator[list[T]]:
            while True:
                slots = self._live()
                refs = [(i, self.source.submit(h, self.method, self.fns)) for i, h in slots]
                deadline = time.monotonic() + self.source.timeout_s
                items = []
                for i, ref in refs:
                    try:
                        items.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
                    except (RayActorError, GetTimeoutError) as e:
                        self.source.on_failure(i, e)
                    except RayTaskError as e:
                        raise WorkerError(f"{self.name}: actor {i} raised {e.cause!r}") from e.cause
                if items:
                    yield items

        return LocalIterator(gen, self._shared, f"{self.name}.batch_across_shards()")

    def gather_sync(self) -> LocalIterator[T]:
        """Items of every actor, round by round: all actors' requests of a round complete
        before the next round is sent."""
        return self.batch_across_shards().flatten()

    def gather_async(self, num_async: int = 1) -> LocalIterator[T]:
        """Items in completion order, with at most ``num_async`` requests in flight per actor.

        A finished actor gets its next request when the consumer pulls again, so
        anything the consumer sends it in between (new weights) is applied first.
        """
        if num_async < 1:
            raise ValueError(f"gather_async: num_async must be >= 1, got {num_async}")

        def gen() -> Iterator[T]:
            pending: dict[ray.ObjectRef, tuple[int, Any, float]] = {}
            in_flight: collections.Counter = collections.Counter()
            while not self._shared.stopped.is_set():
                for i, h in self._live(require=not pending):
                    while in_flight[i] < num_async:
                        pending[self.source.submit(h, self.method, self.fns)] = (i, h, time.monotonic())
                        in_flight[i] += 1
                oldest = min(t for _, _, t in pending.values())
                wait_s = max(0.0, oldest + self.source.timeout_s - time.monotonic())
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
                if not ready:
                    now = time.monotonic()
                    for i in {i for i, _, t in pending.values() if now - t >= self.source.timeout_s}:
                        self._forget(pending, in_flight, i)
                        self.source.on_failure(i, GetTimeoutError(f"no reply in {self.source.timeout_s}s"))
                    continue
                i, h, _ = pending.pop(ready[0])
                in_flight[i] -= 1
                try:
                    item = ray.get(ready[0])
                except RayActorError as e:
                    self._forget(pending, in_flight, i)
                    self.source.on_failure(i, e)
                    continue
                except RayTaskError as e:
                    raise WorkerError(f"{self.name}: actor {i} raised {e.cause!r}") from e.cause
                self.context.current_actor = (i, h)
                yield item

        return LocalIterator(gen, self._shared, f"{self.name}.gather_async({num_async})")

    def _live(self, require: bool = True) -> list[tuple[int, Any]]:
        slots = self.source.live()
        if not slots and require:
            raise RuntimeError(f"{self.name}: no live actors are left to gather from.")
        return slots

    @staticmethod
    def _forget(pending: dict, in_flight: collections.Counter, index: int) -> None:
        for ref in [r for r, (i, _, _) in pending.items() if i == index]:
            del pending[ref]
        in_flight[index] = 0


class ActorPool:
    """The simplest :class:`ActorSource`: fixed actors, any failure raises.

    Each actor must have a method ``run_chain(method, fns)`` (see ``RolloutWorker``)
    or be used with ``fns=()`` and a plain ``method``.
    """

    def __init__(self, actors: Sequence[Any], timeout_s: float = 60.0):
        self.actors, self.timeout_s = list(actors), timeout_s

    def live(self) -> list[tuple[int, Any]]:
        return list(enumerate(self.actors))

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        if fns:
            return handle.run_chain.remote(method, fns)
        return getattr(handle, method).remote()

    def on_failure(self, index: int, error: BaseException) -> None:
        raise RuntimeError(f"actor {index} failed: {error}") from error


def from_actors(actors: Sequence[Any], method: str, context: Context | None = None, timeout_s: float = 60.0) -> ParallelIterator[Any]:
    """A parallel iterator calling ``method`` on each actor for every item."""
    return ParallelIterator(ActorPool(actors, timeout_s), method, context or Context(), name=f"from_actors({method})")
