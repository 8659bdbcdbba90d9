"""Errors that cross a process or a thread keep their type.

An error raised in an actor or on a producer's thread reaches the consumer wrapped in an error
of the dataflow's own (``WorkerError``, a learner thread's or a feeding thread's), which names
where it happened. :func:`carrying` makes that wrapper an instance of the original error's type
too, as Ray's ``RayTaskError.as_instanceof_cause`` does, so that ``except EnvValueError`` catches
an environment's NaN whether the env ran in this process or in a Ray worker.

An error that comes back from another process has lost its traceback on the way (exceptions
pickle without one): :func:`keep_remote_traceback` gives it the actor's traceback, as text, as
its cause (as ``concurrent.futures``' process pool does), so that printing it shows where it
was raised, and :func:`user_frame` finds in it the innermost frame of the user's own code.
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
from typing import TypeVar

E = TypeVar("E", bound=BaseException)

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$', re.MULTILINE)
"""A frame's line in a printed traceback."""
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""A terminal colour code (Ray colours the name of the task in its errors)."""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_ROOTS = tuple(os.path.realpath(os.path.join(_PACKAGE, part)) for part in ("", "envs", "algorithms"))
"""jaxflow's own code: the package, and the folders ``jaxflow.envs`` and ``jaxflow.algorithms`` link to in a checkout."""
_LIBRARY_ROOTS = tuple(
    {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)
"""The standard library and the installed packages (Ray's among them): code that is neither jaxflow's nor the user's."""
_INSTALLED = {"site-packages", "dist-packages"}
"""The folders installed packages live in, on any node."""


def carrying(kind: type[E], message: str, cause: BaseException) -> E:
    """``kind(message)``, made an instance of ``cause``'s type as well where Python can join the
    two classes (else a plain ``kind``); the caller raises it ``from cause``.

    Example:
        >>> error = carrying(RuntimeError, "actor 0 raised ZeroDivisionError()", ZeroDivisionError())
        >>> isinstance(error, RuntimeError), isinstance(error, ZeroDivisionError), str(error)
        (True, True, 'actor 0 raised ZeroDivisionError()')
    """
    joined = _joined(kind, type(cause))
    if joined is not None:
        try:
            error = joined(message)
            if str(error) == message:  # a cause class of its own __init__ or __str__ would garble it
                return error
        except Exception:  # a cause class whose __init__ takes other arguments: the plain kind
            pass
    return kind(message)


_JOINED: dict[tuple[type[BaseException], type[BaseException]], type[BaseException] | None] = {}
"""One joined class per pair of types, so that equal errors share a class (and the classes stay few)."""


def _joined(kind: type[E], cause: type[BaseException]) -> type[E] | None:
    """A subclass of ``kind`` and ``cause``, or None where no such class is needed (a ``kind``
    is already a ``cause``) or can exist (instance layouts that conflict, an order with no MRO)."""
    key = (kind, cause)
    if key not in _JOINED:
        if issubclass(kind, cause):
            _JOINED[key] = None
        elif issubclass(cause, kind):
            _JOINED[key] = cause
        else:
            try:
                _JOINED[key] = type(
                    f"{kind.__name__}[{cause.__name__}]", (kind, cause), {"__module__": kind.__module__}
                )
            except TypeError:
                _JOINED[key] = None
    return _JOINED[key]  # type: ignore[return-value]


class RemoteTraceback(Exception):
    """The traceback, as text, of an error raised in another process: that error's cause, so
    that printing the error shows where it was raised; ``frames`` are its frames, outermost first."""

    def __init__(self, text: str):
        super().__init__(text)
        self.frames = [
            traceback.FrameSummary(m["file"], int(m["line"]), m["name"].strip()) for m in _FRAME.finditer(text)
        ]

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}\n"""'


def keep_remote_traceback(error: BaseException, text: str) -> None:
    """Makes ``text``, the traceback printed where ``error`` was raised (a Ray task error's
    message), the cause of ``error``, which crossed a process without one; an error that has a
    cause already keeps it."""
    if error.__cause__ is None:
        error.__cause__ = RemoteTraceback(_COLOUR.sub("", text).strip())


def frames_of(error: BaseException) -> list[traceback.FrameSummary]:
    """The frames ``error`` was raised through, outermost first: those of its
    :class:`RemoteTraceback` where it came from another process, else its own traceback's."""
    if isinstance(error.__cause__, RemoteTraceback):
        return error.__cause__.frames
    return list(traceback.extract_tb(error.__traceback__))


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code that jaxflow called on the way to ``error`` (or
    to an error in its chain of causes, the innermost such first): code that is neither
    jaxflow's own, nor the standard library's or an installed package's; None where there is none.

    Example:
        >>> error = ValueError("my env bug")
        >>> text = f'  File "{_OWN_ROOTS[0]}/worker.py", line 3, in sample\\n  File "/me/env.py", line 9, in step'
        >>> keep_remote_traceback(error, text)
        >>> location(user_frame(error))
        '/me/env.py:9 in step'
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and not isinstance(current, RemoteTraceback) and current not in chain:
        chain.append(current)
        current = current.__cause__
    for raised in reversed(chain):
        frames = frames_of(raised)
        called = next((i for i, f in enumerate(frames) if _is_own(f.filename)), len(frames))
        users = [f for f in frames[called:] if not _is_own(f.filename) and not _is_library(f.filename)]
        if users:
            return users[-1]
    return None


def location(frame: traceback.FrameSummary) -> str:
    """``FILE:LINE in NAME``: where a frame was."""
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _is_own(filename: str) -> bool:
    """Whether ``filename`` is one of jaxflow's own files: here, or on another node, where jaxflow
    may be installed elsewhere (a path ending in ``jaxflow/<a file this jaxflow has>``)."""
    if filename.startswith("<"):
        return False
    _, found, inside = filename.rpartition(f"{os.sep}jaxflow{os.sep}")
    return _under(filename, _OWN_ROOTS) or bool(found and os.path.isfile(os.path.join(_PACKAGE, inside)))


def _is_library(filename: str) -> bool:
    """Whether ``filename`` is the standard library's or an installed package's (here, or in any
    ``site-packages`` on another node), or a frozen or generated module (``<...>``)."""
    parts = filename.split(os.sep)
    return filename.startswith("<") or _under(filename, _LIBRARY_ROOTS) or bool(_INSTALLED & set(parts))


def _under(filename: str, roots: tuple[str, ...]) -> bool:
    path = os.path.realpath(filename)
    return any(path == root or path.startswith(root + os.sep) for root in roots)
