"""Independent agents of one device-mode run: seeds times the values of a swept field."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax

from jaxflow.config.names import resolve, with_values

Array = jax.Array


class Member(NamedTuple):
    """One independent agent of a device-mode run."""

    name: str
    seed: int
    hyper: dict[str, float]


def members(config: Any) -> list[Member]:
    """The agents a config trains: each value of ``sweep`` (at most one field, named flat or
    dotted) times ``num_seeds`` seeds ``seed, seed + 1, ...``, sweep-major. Each member's
    ``hyper`` holds its value of the swept field and of every field population-based training
    perturbs (``pbt``), which start at the config's values."""
    field, values = next(iter(config.device.sweep.items())) if config.device.sweep else (None, [0.0])
    perturbed = {k: float(config_value(config, k)) for k in hyper_names(config) if k != field}
    out = []
    for value in values:
        for i in range(config.device.num_seeds):
            seed = config.seed + i
            hyper = dict(perturbed) if field is None else {field: float(value), **perturbed}
            out.append(Member(f"seed={seed}" + ("" if field is None else f",{field}={value:g}"), seed, hyper))
    return out


def hyper_names(config: Any) -> list[str]:
    """The names of the fields each member holds a value of: the swept field (as the sweep names
    it), then each PBT field not swept (as ``pbt`` names it)."""
    swept = list(config.device.sweep)
    own = {resolve(type(config), f) for f in swept}
    return swept + [f for f in config.device.pbt if resolve(type(config), f) not in own]


def config_value(config: Any, name: str) -> Any:
    """The value of setting ``name`` (flat or dotted) of ``config``."""
    return functools.reduce(getattr, resolve(type(config), name), config)


def with_hyper(config: Any, hyper: Mapping[str, Array]) -> Any:
    """A copy of ``config`` whose swept and perturbed fields hold the member's (traced) values."""
    return with_values(config, dict(hyper))
