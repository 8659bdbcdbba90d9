"""Errors that cross a process or a thread keep their type.

An error raised in an actor or on a producer's thread reaches the consumer wrapped in an error
of the dataflow's own (``WorkerError``, a learner thread's or a feeding thread's), which names
where it happened. :func:`carrying` makes that wrapper an instance of the original error's type
too, as Ray's ``RayTaskError.as_instanceof_cause`` does, so that ``except EnvValueError`` catches
an environment's NaN whether the env ran in this process or in a Ray worker.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


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
