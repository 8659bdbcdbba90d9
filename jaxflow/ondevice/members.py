"""Independent agents of one device-mode run: seeds times the values of a swept field."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax

from jaxflow.config.names import resolve

Array = jax.Array


class Member(NamedTuple):
    """One independent agent of a device-mode run."""

    name: str
    seed: int
    hyper: dict[str, float]


def members(config: Any) -> list[Member]:
    """The agents a config trains: each value of ``sweep`` (at most one field, named flat or
    dotted) times ``num_seeds`` seeds ``seed, seed + 1, ...``, sweep-major."""
    field, values = next(iter(config.device.sweep.items())) if config.device.sweep else (None, [0.0])
    out = []
    for value in values:
        for i in range(config.device.num_seeds):
            seed = config.seed + i
            hyper = {} if field is None else {field: float(value)}
            out.append(Member(f"seed={seed}" + ("" if field is None else f",{field}={value:g}"), seed, hyper))
    return out


def with_hyper(config: Any, hyper: Mapping[str, Array]) -> Any:
    """A copy of ``config`` whose swept fields hold the member's (traced) values.

    The copy skips validation on purpose: the values are tracers inside the compiled
    function, and every one of them was validated as a number when the run was configured.
    """
    if not hyper:
        return config
    traced = copy.copy(config)
    for k, v in hyper.items():  # k as the sweep names it, flat or dotted
        *group, leaf = resolve(type(config), k)
        owner = traced
        if group:  # copy the group too: the config's own group is shared with the caller
            owner = copy.copy(getattr(traced, group[0]))
            object.__setattr__(traced, group[0], owner)
        object.__setattr__(owner, leaf, v)
    return traced
