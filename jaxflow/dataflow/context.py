"""What every iterator of one plan shares: counters, free-form information, and the actor
that produced the item in hand."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any


@dataclasses.dataclass
class FlowContext:
    """The shared state of one plan's iterators.

    ``counters`` add up (items, steps, updates); ``info`` holds the latest of whatever the
    operators report; ``current_actor`` is ``(index, handle)`` of the actor that produced
    the item being processed, set by the gathers from actors. ``Concurrently`` merges the
    contexts of the plans it joins, so a whole plan has one.

    Example:
        >>> ctx = FlowContext()
        >>> ctx.counters["items"] += 2
        >>> other = FlowContext(); ctx.merge_into(other); other.counters["items"]
        2
    """

    counters: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    current_actor: tuple[int, Any] | None = None

    def merge_into(self, other: FlowContext) -> None:
        """Adds this context's counts and information to ``other``."""
        other.counters.update(self.counters)
        other.info.update(self.info)
