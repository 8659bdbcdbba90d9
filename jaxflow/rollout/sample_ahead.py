"""Sampling one fragment ahead of the plan's requests, in a background thread (RLlib's
``sample_async``).
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

from jaxflow.dataflow.producer import Producer, ProducerError


class SampleAhead:
    """Runs ``rollout`` in a background thread one call ahead of :meth:`take` (RLlib's
    ``sample_async``): the thread steps the next fragment while the caller postprocesses
    and returns the one it took, so a worker's emulators do not wait for that.

    At most one rollout runs ahead, so what it acts with is at most one fragment older
    than what the caller would have used. An exception in the thread is raised by the
    :meth:`take` that would have returned its rollout.

    Example:
        >>> ahead = SampleAhead(iter(range(3)).__next__)
        >>> ahead.take(), ahead.take()
        (0, 1)
    """

    def __init__(self, rollout: Callable[[], Any]):
        self._producer: Producer[Any] = Producer(lambda: iter(rollout, _NEVER), ahead=1, name="sample-ahead")
        _SAMPLERS.add(self)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stops the thread once the rollout it is in (if any) ends; :meth:`take` then raises.
        Also run at interpreter exit: a thread left inside an emulator step aborts the process."""
        self._producer.close(timeout_s)

    def take(self) -> Any:
        if self._producer.stopping():
            raise RuntimeError("the sampler thread was closed")
        if not self._producer.started:  # the first call starts the thread
            self._producer.start()
        try:
            return self._producer.get()
        except ProducerError as e:
            raise e.error from None  # the rollout's own error, as a worker without the thread raises it


_NEVER = object()
"""``iter(rollout, _NEVER)`` calls ``rollout`` for ever: no fragment is this object."""


_SAMPLERS: weakref.WeakSet[SampleAhead] = weakref.WeakSet()


@atexit.register
def _close_samplers() -> None:
    for sampler in list(_SAMPLERS):
        sampler.close()
