"""Search spaces from text: ``--search 'lr=loguniform(1e-4,1e-2)'`` parsed into a
:class:`SearchDim`, checked against the algorithm's config before anything starts, and
turned into Ray Tune's sampling domain (Bergstra & Bengio 2012, random search; grid search
as Tune runs it, every value once per sample)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ray import tune

from jaxflow.config.fields import ConfigError
from jaxflow.config.names import field_check, make_config, resolve
from jaxflow.config.parsing import parse_value

RANGES = ("loguniform", "uniform", "randint")
"""Kinds that take ``(LOW,HIGH)``: floats log-uniform or uniform in [LOW, HIGH), integers in [LOW, HIGH)."""
LISTS = ("choice", "grid_search")
"""Kinds that take values ``(V1,V2,...)``: one drawn per trial, or every one tried."""
FORMS = (
    "FIELD=loguniform(LOW,HIGH), FIELD=uniform(LOW,HIGH), FIELD=randint(LOW,HIGH) (HIGH excluded), "
    "FIELD=choice(V1,V2,...) or FIELD=grid_search(V1,V2,...)"
)
"""What a search item may look like, for the error that refuses one."""

_ITEM = re.compile(r"^\s*(?P<field>[A-Za-z_][\w.]*)\s*=\s*(?P<kind>\w+)\s*\((?P<args>.*)\)\s*$")


@dataclasses.dataclass(frozen=True)
class SearchDim:
    """One searched config field: ``kind`` (out of :data:`RANGES` and :data:`LISTS`) over ``values``.

    Example:
        >>> dim = SearchDim("lr", "loguniform", (1e-4, 1e-2))
        >>> domain = dim.domain()
        >>> type(domain).__name__, domain.lower, domain.upper
        ('Float', 0.0001, 0.01)
    """

    field: str
    kind: str
    values: tuple[Any, ...]

    def domain(self) -> Any:
        """Ray Tune's domain for this field (``tune.loguniform(...)`` and the like)."""
        return (
            getattr(tune, self.kind)(*self.values)
            if self.kind in RANGES
            else getattr(tune, self.kind)(list(self.values))
        )

    def probes(self) -> tuple[Any, ...]:
        """The values a trial may get at the edges: a range's ends (an integer range's last
        included one), every listed value."""
        if self.kind == "randint":
            return (self.values[0], self.values[1] - 1)
        return self.values


def parse_search(cls: type, text: str) -> SearchDim:
    """``"lr=loguniform(1e-4,1e-2)"`` -> ``SearchDim("lr", "loguniform", (0.0001, 0.01))``
    for config class ``cls``; listed values are parsed as the field's type (``--set``'s parsing).

    Raises :class:`ConfigError` naming ``text`` and the allowed forms (:data:`FORMS`).
    """
    match = _ITEM.match(text)
    if match is None:
        raise ConfigError(f"--search {text!r} does not parse; write {FORMS}.")
    field, kind = match["field"], match["kind"]
    args = [a.strip() for a in match["args"].split(",")]
    if kind not in RANGES + LISTS:
        raise ConfigError(f"--search {text!r}: unknown kind {kind!r}; write {FORMS}.")
    resolve(cls, field)  # an unknown field: the closest names and every allowed one
    if "" in args:
        raise ConfigError(f"--search {text!r}: an empty value; write {FORMS}.")
    if kind in LISTS:
        return SearchDim(field, kind, tuple(parse_value(cls, field, a) for a in args))
    number = int if kind == "randint" else float
    try:
        low, high = (number(a) for a in args)
    except ValueError:
        raise ConfigError(
            f"--search {text!r}: {kind} takes two {number.__name__}s (LOW,HIGH); write {FORMS}."
        ) from None
    if not low < high or (kind == "loguniform" and low <= 0):
        raise ConfigError(f"--search {text!r}: {kind} needs {'0 < ' if kind == 'loguniform' else ''}LOW < HIGH.")
    return SearchDim(field, kind, (low, high))


def search_space(cls: type, items: Sequence[str], fixed: Mapping[str, Any]) -> list[SearchDim]:
    """Each ``--search`` item parsed and checked with the ``fixed`` settings: every field once
    and not also fixed, and a config built at each dim's :meth:`SearchDim.probes`, so that a
    value the config refuses fails now, not in a trial."""
    dims = [parse_search(cls, item) for item in items]
    paths = [resolve(cls, d.field) for d in dims]
    for i, (dim, path) in enumerate(zip(dims, paths)):
        if path in paths[:i]:
            raise ConfigError(f"--search {dim.field}: the field is searched twice; give it once.")
        if any(resolve(cls, name) == path for name in fixed):
            raise ConfigError(f"--search {dim.field}: the field is also fixed (--set or a flag); give it once.")
        for value in dim.probes():
            try:
                make_config(cls, **fixed, **{dim.field: value})
            except ConfigError as e:
                raise ConfigError(f"--search {dim.field}={dim.kind}{dim.values}: at {value!r}, {e}") from None
    return dims


class KeepInBounds:
    """PBT's explore, kept within each perturbed field's validated bounds: Tune multiplies a
    value by 0.8 or 1.2 past its search range, which may leave what the config allows
    (``gamma`` 0.99 becomes 1.188) and would fail the trial; each value is moved to the
    nearest allowed one (:meth:`~jaxflow.config.fields.Check.nearest`, the field's own
    check, not a copy of it). Tune's ``custom_explore_fn``.

    Example:
        >>> from jaxflow.api.registry import get_algorithm
        >>> keep = KeepInBounds(get_algorithm("PPO").config_cls, ["gamma", "lr"])
        >>> keep({"gamma": 1.188, "lr": 0.012})
        {'gamma': 1.0, 'lr': 0.012}
    """

    def __init__(self, cls: type, fields: Sequence[str]):
        self.checks = {f: check for f in fields if (check := field_check(cls, f)) is not None}

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for field, check in self.checks.items():
            if isinstance(config.get(field), (int, float)):
                config[field] = check.nearest(config[field])
        return config
