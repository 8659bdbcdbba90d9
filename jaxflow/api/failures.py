"""A training run that fails: its traceback kept in the run's ``error.log``, and a divergence
guard's stop (:class:`~jaxflow.rollout.guards.DivergenceError`: a NaN or infinite value from an
env, a policy or an update) or an error raised in the user's own code (an env's bug, in this
process or in a Ray worker) told to a ``jaxflow train`` user in one line, which names the file
and line of the user's code (:func:`~jaxflow.dataflow.errors.user_frame`).

A guard's error may reach the driver wrapped (a Ray worker's in a ``WorkerError``, a learner
thread's in a ``LearnerThreadError``); the wrappers are instances of the guard's type too
(:func:`~jaxflow.dataflow.errors.carrying`), and the guard's own message, which names the env,
the step and the setting that lets such values through, is the innermost one in the chain.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import TYPE_CHECKING, Any

from jaxflow.api.logdir import ERROR_LOG

if TYPE_CHECKING:
    from jaxflow.rollout.guards import DivergenceError

RUN_FAILURE_STATUS = 1
"""``jaxflow train``'s exit status for a run stopped by a divergence guard or the user's code (2 is bad input's)."""


class RunFailure(Exception):
    """A run stopped by a divergence guard or by an error in the user's code, in one line for
    the command line (its cause the error)."""


def record_failure(logdir: str, error: BaseException, iteration: int) -> str:
    """Appends ``error``'s full traceback to ``<logdir>/error.log``, headed by the time and the
    iteration the run had completed, and returns the file's path; earlier failures of the run
    (before a resume) stay above it."""
    path = os.path.join(logdir, ERROR_LOG)
    header = f"=== {time.strftime('%Y-%m-%d %H:%M:%S')}: failed after iteration {iteration}\n"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(header + "".join(traceback.format_exception(error)) + "\n")
    except OSError:
        pass  # a logdir gone or full: the error itself still reaches the caller
    return path


def guard_error(error: BaseException) -> DivergenceError | None:
    """The divergence guard's own error in ``error``'s chain of causes (the innermost one of a
    guard's type), or None where no guard stopped the run."""
    from jaxflow.rollout.guards import DivergenceError  # the engine, once a run has failed

    found = None
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DivergenceError):
            found = current
        current = current.__cause__
    return found


def run_failure(error: BaseException, what: str, logdir: str) -> RunFailure | None:
    """The one-line :class:`RunFailure` for a run (``what``: its algorithm and env) that ``error``
    ended, where a divergence guard did, or the user's code raised it (an env's bug: its file and
    line named); its full traceback is in ``logdir``'s ``error.log``. None for jaxflow's own errors."""
    found = _stopped_by(error)
    if found is None:
        return None
    message, kind = found
    log = os.path.join(logdir, ERROR_LOG)
    where = f"the traceback is in {log}" if os.path.exists(log) else "no error.log could be written"
    return RunFailure(f"{what} stopped: {message} ({kind}; {where})")


def command_failure(error: BaseException, command: str) -> RunFailure | None:
    """The one-line :class:`RunFailure` for a command that writes no run (``evaluate``,
    ``export``) which ``error`` ended, where a divergence guard or the user's code (an env's bug,
    its file and line named) raised it; None for jaxflow's own errors. ``--debug`` shows the traceback."""
    found = _stopped_by(error)
    if found is None:
        return None
    message, kind = found
    return RunFailure(f"{command} stopped: {message} ({kind}; --debug shows the traceback)")


def _stopped_by(error: BaseException) -> tuple[str, str] | None:
    """``(message, type name)`` of the divergence guard or the user's code that raised ``error``, or None."""
    guard = guard_error(error)
    if guard is not None:
        return " ".join(str(guard).split()), type(guard).__name__
    return _raised_by_user(error)


def _raised_by_user(error: BaseException) -> tuple[str, str] | None:
    """``(message, type name)`` of an error raised in the user's code, the message naming the
    code's file and line (a Ray worker's error names them already); None where jaxflow raised it."""
    from jaxflow.dataflow.errors import location, user_frame

    frame = user_frame(error)
    if frame is None:
        return None
    message = " ".join((str(error).strip().splitlines() or [type(error).__name__])[0].split())
    at = location(frame)
    return (message if at in message else f"{message} at {at}"), _innermost(error).__name__


def _innermost(error: BaseException) -> type[BaseException]:
    """The type of the innermost error in ``error``'s chain of causes (an actor's traceback aside)."""
    from jaxflow.dataflow.errors import RemoteTraceback

    seen: set[int] = set()
    while isinstance(error.__cause__, BaseException) and not isinstance(error.__cause__, RemoteTraceback):
        if id(error) in seen:
            break
        seen.add(id(error))
        error = error.__cause__
    return type(error)


def raise_run_failure(error: Exception, algo: Any, logdir: str) -> None:
    """Raises the :func:`run_failure` of ``algo``'s run (from ``error``) where a divergence guard
    or the user's code stopped it; returns otherwise."""
    failure = run_failure(error, f"{algo.spec.name} on {getattr(algo.config, 'env', '?')!r}", logdir)
    if failure is not None:
        raise failure from error
