"""Running several streams of one plan together: round robin or in threads (RLlib Flow's
``Concurrently``), and a blocking queue put that gives up when its consumer has gone.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jaxflow.config.constants import POLL_S
from jaxflow.dataflow.iterators import NOT_READY, LocalIterator


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
            except BaseException as e:
                put(_Failure(e))
            else:
                put(done)

        threads = [
            threading.Thread(target=run, args=(i, op), daemon=True, name=f"Concurrently[{i}]")
            for i, op in enumerate(ops)
        ]
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
