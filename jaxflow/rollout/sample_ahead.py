"""Sampling one fragment ahead of the plan's requests, in a background thread (RLlib's
``sample_async``).
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import Any


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
        self._rollout = rollout
        self._wanted = threading.Semaphore(0)
        self._ready = threading.Semaphore(0)
        self._result: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sample-ahead", daemon=True)
        _SAMPLERS.add(self)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stops the thread once the rollout it is in (if any) ends; :meth:`take` then raises.
        Also run at interpreter exit: a thread left inside an emulator step aborts the process."""
        if self._closed:
            return
        self._closed = True
        self._wanted.release()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        self._error = self._error or RuntimeError("the sampler thread was closed")
        self._ready.release()

    def take(self) -> Any:
        if self._thread.ident is None and not self._closed:  # the first call starts the thread
            self._wanted.release()
            self._thread.start()
        self._ready.acquire()
        if self._error is not None:
            self._ready.release()  # every later take() raises it too, instead of blocking
            raise self._error
        result = self._result
        self._wanted.release()
        return result

    def _run(self) -> None:
        while True:
            self._wanted.acquire()
            if self._closed:
                return
            try:
                self._result = self._rollout()
            except BaseException as error:
                self._error = error
                self._ready.release()
                return
            self._ready.release()


_SAMPLERS: weakref.WeakSet[SampleAhead] = weakref.WeakSet()


@atexit.register
def _close_samplers() -> None:
    for sampler in list(_SAMPLERS):
        sampler.close()
