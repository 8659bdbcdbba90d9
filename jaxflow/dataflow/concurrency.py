"""Running several streams of one plan together: round robin or in threads (RLlib Flow's
``Concurrently``), and a blocking queue put that gives up when its consumer has gone.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jaxflow.config.constants import POLL_S
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator
from jaxflow.dataflow.producer import Producer, ProducerError, merged


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
        >>> from jaxflow.dataflow.iterators import from_items
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
    if any(isinstance(w, str) and w != "*" for w in weights):
        raise ValueError(f"Concurrently: a round_robin_weight is a number or '*', got {weights}")
    shared = _share_one_context(ops)
    if mode == "round_robin":
        gen = functools.partial(_round_robin, ops, outputs, weights)
    else:
        gen = functools.partial(_in_threads, ops, outputs, shared)
    return LocalIterator(gen, shared, f"Concurrently[{mode}]")


def _share_one_context(ops: list[LocalIterator[Any]]) -> Any:
    """Points every op at the first op's context, stop flag and thread list (merging what
    the others had counted), so the plan has one set of metrics and stops as one."""
    shared = ops[0]._shared
    for op in ops[1:]:
        if op._shared.context is not shared.context:
            op._shared.context.merge_into(shared.context)
            op._shared.context = shared.context
        op._shared.stopped = shared.stopped
        if op._shared.threads is not shared.threads:
            shared.threads.extend(op._shared.threads)
            op._shared.threads = shared.threads
    return shared


def _round_robin(ops: list[LocalIterator[Any]], outputs: set[int], weights: list[Any]) -> Iterator[Any]:
    alive = [True] * len(ops)
    while any(alive):
        progressed = False
        for i, op in enumerate(ops):
            if not alive[i]:
                continue
            n = weights[i]
            pulled = 0
            while isinstance(n, str) or pulled < n:  # the only string weight is "*"
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


def _in_threads(ops: list[LocalIterator[Any]], outputs: set[int], shared: Any) -> Iterator[Any]:
    out: queue.Queue = queue.Queue()
    stop = threading.Event()

    def stopping() -> bool:
        return stop.is_set() or shared.stopped.is_set()

    producers = [
        Producer(
            functools.partial(_ready_items, op, i in outputs, stopping),
            ASYNC_AHEAD,
            f"Concurrently[{i}]",
            stopping,
            out,
        )
        for i, op in enumerate(ops)
    ]
    shared.threads.extend(p.thread for p in producers)
    for p in producers:
        p.start()
    try:
        yield from merged(producers)
    except ProducerError as e:
        raise e.error from None  # the op's own error, as a round-robin plan would raise it
    finally:
        stop.set()


ASYNC_AHEAD = 2
"""Items each op of an asynchronous ``Concurrently`` may run ahead of the consumer."""

NOT_READY_BACKOFF_S = 1e-3
"""How long an asynchronous op waits after a ``NOT_READY`` before pulling again."""


def _ready_items(op: LocalIterator[Any], emit: bool, stopping: Callable[[], bool]) -> Iterator[Any]:
    """``op``'s items without ``NOT_READY``s (all of them if ``emit``, else none: an op
    outside ``output_indexes`` runs for its effects), until ``stopping()``."""
    for item in op._items():
        if stopping():
            return
        if item is NOT_READY:
            time.sleep(NOT_READY_BACKOFF_S)  # a duplicate() sibling must catch up first
        elif emit:
            yield item


def put(q: queue.Queue, item: Any, give_up: Callable[[], bool]) -> bool:
    """Blocks until ``item`` is in ``q`` (True) or ``give_up()`` turns true (False),
    checking ``give_up`` every half second rather than spinning."""
    while not give_up():
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False
