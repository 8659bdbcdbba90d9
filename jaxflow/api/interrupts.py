"""Ctrl-C (SIGINT) and SIGTERM (what ``timeout``, SLURM and Kubernetes send) while a run trains.

Inside the training loop (:func:`deferred`) the first signal only asks the loop to stop: the
iteration in flight finishes, a final checkpoint is written, and
:func:`~jaxflow.api.loop.train` raises :class:`TrainingInterrupted` naming it. A second signal
stops at once (:class:`Interrupted`, raised where it lands). Outside the loop, ``jaxflow``
stops at once on either signal (:func:`sigterm_raises` makes SIGTERM do what Ctrl-C does), and
every command ends on one line with the shell's status for the signal, 128 + its number.

Python runs signal handlers in the main thread only, so handlers are installed only there (a
loop in another thread is left to the signals' own handlers), and the previous handlers are put
back afterwards: a notebook's Ctrl-C works as before once ``train()`` returns. A signal
ignored when the loop starts (``nohup``, a shell's background job) stays ignored. A handler
installed outside Python, such as Ray's, which prints a stack dump on SIGTERM, is invisible
to :func:`signal.getsignal`: Python's own record of the previous handler is what comes back.

Only this module's imports (no JAX, no Ray): ``jaxflow --help`` loads it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a run stops on, finishing its iteration and saving it first."""

SIGNAL_EXIT_BASE = 128
"""A process ended by signal N exits with status 128 + N in the shell's convention (130: SIGINT, 143: SIGTERM)."""


def signal_name(signum: int) -> str:
    """``"SIGINT"`` for 2, and so on."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """A signal that stopped the command at once (a ``KeyboardInterrupt``, as Ctrl-C's own is,
    so ``except Exception`` lets it through). :attr:`exit_status` is the shell's status for it."""

    def __init__(self, signum: int, message: str = ""):
        super().__init__(message or f"stopped by {signal_name(signum)}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return SIGNAL_EXIT_BASE + self.signum


class TrainingInterrupted(Interrupted):
    """:func:`~jaxflow.api.loop.train` stopped by a signal. ``checkpoint`` is the newest checkpoint
    of the run (None: none), ``iteration`` the iteration the run got to, ``saved`` whether the
    loop wrote ``checkpoint`` for that iteration on the way out. Its message is one line."""

    def __init__(self, signum: int, message: str, iteration: int, checkpoint: str | None, saved: bool):
        super().__init__(signum, message)
        self.iteration, self.checkpoint, self.saved = iteration, checkpoint, saved


def interruptible(command: Callable[[Sequence[str]], int], argv: Sequence[str]) -> int:
    """``command(argv)``'s exit status; where Ctrl-C or SIGTERM (:func:`sigterm_raises`) stops
    it, one line on stderr (:func:`interrupted_line`) and 128 + the signal's number (``--debug``:
    the traceback instead)."""
    _LAST_RAISED[0] = None  # an earlier command's, in a process that runs several (tests)
    with sigterm_raises():
        try:
            return command(argv)
        except KeyboardInterrupt as e:
            if "--debug" in argv:
                raise
            line, status = interrupted_line(e)
            print(f"jaxflow: {line}", file=sys.stderr)
            return status


def interrupted_line(error: KeyboardInterrupt) -> tuple[str, int]:
    """The one line (without ``jaxflow: ``) and the exit status of a command that ``error``
    stopped: a training run's own line (naming its checkpoint), also where a further signal came
    while the run shut down; else the signal's."""
    signum = error.signum if isinstance(error, Interrupted) else (_LAST_RAISED[0] or signal.SIGINT)
    context: BaseException | None = error
    while context is not None and not isinstance(context, TrainingInterrupted):
        context = context.__context__
    if context is error:
        return str(error), SIGNAL_EXIT_BASE + signum
    if isinstance(context, TrainingInterrupted):
        return f"{context}; then stopped at once by {signal_name(signum)} while shutting down", context.exit_status
    return f"interrupted by {signal_name(signum)}, stopped at once", SIGNAL_EXIT_BASE + signum


class Caught:
    """The signal that asked a :func:`deferred` block to stop (None: none yet), and the one that
    stopped it at once (``again``): Ray's waits turn the :class:`Interrupted` raised in them into
    a plain ``KeyboardInterrupt``, so the signal is kept here too."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.again: int | None = None


@contextlib.contextmanager
def deferred(announce: Callable[[int], str]) -> Iterator[Caught]:
    """Within the block, the first SIGINT or SIGTERM is recorded in the :class:`Caught` it
    yields (and ``announce(signum)``, one line saying what happens next, is written to stderr);
    the next one raises :class:`Interrupted`. Outside the main thread nothing is installed and
    nothing is ever caught."""
    caught = Caught()

    def handler(signum: int, frame: FrameType | None) -> None:
        if caught.signum is not None:
            caught.again = _LAST_RAISED[0] = signum
            raise Interrupted(signum, f"stopped at once by a second {signal_name(signum)}")
        caught.signum = signum
        _say(announce(signum))

    with _installed(SIGNALS, handler):
        yield caught


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Interrupted` where it lands, as Ctrl-C raises
    ``KeyboardInterrupt``, so the command ends through its own error handling (one line) instead
    of Python's silent death or Ray's stack dump. See :func:`starting_ray`."""
    with _installed((signal.SIGTERM,), _raise_on_sigterm):
        yield


@contextlib.contextmanager
def starting_ray() -> Iterator[None]:
    """Around ``ray.init`` inside a :func:`sigterm_raises` block: Ray installs its own SIGTERM
    handlers while it starts (``sys.exit(15)``; once connected, a stack dump before it, which
    :func:`python_sigterm_again` takes away); a SIGTERM in between is raised as
    :class:`Interrupted`, and once Ray is up the block's handler is installed again."""
    try:
        yield
    except SystemExit as e:
        if e.code != signal.SIGTERM:
            raise
        raise Interrupted(signal.SIGTERM) from None
    if _is_main_thread() and _RAISING_BLOCKS[0] > 0:
        signal.signal(signal.SIGTERM, _raise_on_sigterm)


def python_sigterm_again() -> None:
    """Puts Python's SIGTERM handler back in front of the one Ray's core worker installs as this
    process connects (absl's failure handler, which prints a stack dump of ~10-60 lines on every
    SIGTERM, as ``timeout`` or a notebook kernel's shutdown sends, before it calls Python's). Python's
    handler, Ray's own (``sys.exit``) or a command's, then runs alone. Only SIGTERM: a real crash
    (SIGSEGV, SIGABRT) keeps absl's dump. In the main thread only, where Python's handlers live."""
    handler = signal.getsignal(signal.SIGTERM)
    if _is_main_thread() and handler is not None:
        signal.signal(signal.SIGTERM, handler)


_RAISING_BLOCKS = [0]
"""How many :func:`sigterm_raises` blocks are open (in the main thread)."""


_LAST_RAISED: list[int | None] = [None]
"""The signal this module's handlers last raised :class:`Interrupted` for: a wait in Ray raises
a plain ``KeyboardInterrupt`` in its place, which would otherwise read as Ctrl-C's."""


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    _LAST_RAISED[0] = signum
    raise Interrupted(signum)


@contextlib.contextmanager
def _installed(signums: tuple[int, ...], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for each of ``signums`` not ignored now, in the main thread only; the previous
    handlers put back on the way out (the default action where Python knows of none)."""
    previous: dict[int, Any] = {}
    if _is_main_thread():
        for signum in signums:
            before = signal.getsignal(signum)
            if before is not signal.SIG_IGN:  # nohup's and a background job's choice stays
                previous[signum] = before
                signal.signal(signum, handler)
    raising = handler is _raise_on_sigterm and bool(previous)
    _RAISING_BLOCKS[0] += raising
    try:
        yield
    finally:
        _RAISING_BLOCKS[0] -= raising
        for signum, before in previous.items():
            signal.signal(signum, signal.SIG_DFL if before is None else before)


def _is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _say(line: str) -> None:
    """Writes ``line`` to stderr from a signal handler: the main thread may have been stopped
    inside a write to stderr, and a buffered stream refuses a reentrant write."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (RuntimeError, OSError, ValueError):
        pass  # stderr busy or closed: the loop's last line says what happened anyway
