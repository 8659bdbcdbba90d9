"""Frozen, validated config fields: their declaration, types and constraints.

A config field is declared with :func:`param`, which records its constraint; a
config class calls :func:`validate` from ``__post_init__`` so an invalid config
never exists -- it fails on construction, before any actor starts, naming the
field and the allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal


class ConfigError(ValueError):
    """An invalid config field, value, or combination."""


@dataclasses.dataclass(frozen=True)
class Check:
    """A constraint on a number: ``low < x`` (or ``<=`` when ``low_inclusive``), and so on."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    high_name: str = dataclasses.field(default="", compare=False)
    """The named constant ``high`` is (``MAX_SIZE``), which the refusal names beside the number."""

    def __call__(self, x: float) -> bool:
        if x is None:  # an optional field left unset
            return True
        if x != x:  # NaN satisfies no bound, but fails none of the comparisons below
            return False
        if self.low is not None and (x < self.low or (x == self.low and not self.low_inclusive)):
            return False
        if self.high is not None and (x > self.high or (x == self.high and not self.high_inclusive)):
            return False
        return True

    def nearest(self, x: float) -> float:
        """The allowed value closest to ``x`` (of its type): ``x`` itself, an inclusive bound,
        or the next value inside an exclusive one (the next integer, or the next float).

        Example:
            >>> UNIT.nearest(1.188), POSITIVE.nearest(-2), UNIT.nearest(0.5)
            (1.0, 1, 0.5)
        """
        integer = isinstance(x, int) and not isinstance(x, bool)
        kind = int if integer else float
        if self.low is not None and x <= self.low and not self(x):
            inside = self.low + 1 if integer else math.nextafter(self.low, math.inf)
            return kind(self.low if self.low_inclusive else inside)
        if self.high is not None and x >= self.high and not self(x):
            inside = self.high - 1 if integer else math.nextafter(self.high, -math.inf)
            return kind(self.high if self.high_inclusive else inside)
        return x

    def __str__(self) -> str:
        lo = "" if self.low is None else f"{self.low} {'<=' if self.low_inclusive else '<'} "
        hi = "" if self.high is None else f" {'<=' if self.high_inclusive else '<'} {self.high}"
        hi += f" ({self.high_name})" if self.high_name and self.high is not None else ""
        return f"{lo}value{hi}"


POSITIVE = Check(low=0, low_inclusive=False)


NON_NEGATIVE = Check(low=0)


UNIT = Check(low=0, high=1)


MAX_SIZE = 2**31 - 1
"""The largest value of an integer size or count field (a batch, buffer, fragment, number of
environments, episodes, steps or iterations): the largest int32, the integer JAX computes
with (64-bit types are off), so a size past it cannot index an array or count on a device.
It is also what stops a typo (``train_batch_size=1000000000000``) before anything is
allocated; what fits in memory is smaller, and is the machine's to say."""


SIZE = Check(low=0, high=MAX_SIZE, low_inclusive=False, high_name="MAX_SIZE")
"""An integer size or count above 0, at most :data:`MAX_SIZE`."""


COUNT = Check(low=0, high=MAX_SIZE, high_name="MAX_SIZE")
"""An integer size or count of 0 or more, at most :data:`MAX_SIZE`."""


def param(default: Any, check: Check | None = None, *, factory: Callable[[], Any] | None = None) -> Any:
    """A config field with an optional numeric constraint checked by :func:`validate`."""
    meta = {"check": check} if check else {}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # Resolving string annotations is slow and a class's never change: every config built,
    # parsed or checked asks for them, so once per class.
    return typing.get_type_hints(cls)


def _tuple_hint(tp: Any) -> bool:
    """Whether ``tp`` is a tuple type, or an optional one."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_tuple_hint(t) for t in typing.get_args(tp))
    return typing.get_origin(tp) is tuple or tp is tuple


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, t) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_type_ok(v, args[0]) for v in value)
        return len(args) == len(value) and all(_type_ok(v, t) for v, t in zip(value, args))
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return isinstance(value, Mapping)
    return isinstance(value, origin or tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def validate(config: Any) -> None:
    """Checks every field's type and constraint; raises :class:`ConfigError` naming the first bad one."""
    cls: type = type(config)
    name = cls.__name__
    hints = _hints(cls)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, list) and _tuple_hint(hints[f.name]):
            # A list where a tuple is meant (hidden_sizes=[64, 64]): stored as the tuple, so
            # the config stays hashable and compares equal to one built with a tuple.
            value = tuple(value)
            object.__setattr__(config, f.name, value)
        if not _type_ok(value, hints[f.name]):
            raise ConfigError(f"{name}.{f.name} must be {_type_name(hints[f.name])}, got {value!r}.")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}.{f.name} must be a finite number, got {value!r}.")
        check = f.metadata.get("check")
        if check is not None and not check(value):
            raise ConfigError(f"{name}.{f.name} must satisfy {check}, got {value!r}.")


def require(condition: bool, message: str) -> None:
    """Raises :class:`ConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


CLOSE_NAMES = 3
"""The most names a :func:`did_you_mean` hint offers."""
CLOSE_ENOUGH = 0.6
"""How alike (``difflib``'s ratio, its default cutoff) a name must be to be offered."""


def did_you_mean(name: str, candidates: Iterable[str], cutoff: float = CLOSE_ENOUGH) -> str:
    """The hint of an error naming something unknown: the up to :data:`CLOSE_NAMES` of
    ``candidates`` closest to ``name``, closest first, quoted and joined with "or", after a
    space, to follow the error's first sentence; "" when none is close enough.

    >>> did_you_mean("lr_", ["lr", "lr_end", "gamma"])
    " Did you mean 'lr' or 'lr_end'?"
    >>> did_you_mean("gamm", ["gamma"]), did_you_mean("zzz", ["gamma"])
    (" Did you mean 'gamma'?", '')
    """
    close = [repr(c) for c in difflib.get_close_matches(name, list(candidates), n=CLOSE_NAMES, cutoff=cutoff)]
    if not close:
        return ""
    names = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" Did you mean {names}?"


def field_names(cls: type) -> list[str]:
    """The names of a dataclass's own fields (a group field counts once, by its own name)."""
    return [f.name for f in dataclasses.fields(cls)]
