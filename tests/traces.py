"""Which jitted functions JAX traces while a block runs: a function traced again compiles
again (or, with the persistent cache, at least loads again), so "traced nothing" is how the
tests say "nothing recompiled" without timing anything."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
"""What JAX's dispatch records, with the function's name, each time it traces a function."""


@contextlib.contextmanager
def traced() -> Iterator[list[str]]:
    """Yields a list that fills with the name of each function traced inside the block.

    Example:
        >>> f = jax.jit(lambda x: x + 1)
        >>> with traced() as names:
        ...     _ = f(1.0), f(2.0), f(1)  # float, float again, then an int: two traces
        >>> len(names)
        2
    """
    names: list[str] = []

    def listen(event: str, _duration: float, **meta: Any) -> None:
        if event == TRACE_EVENT:
            names.append(str(meta.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
