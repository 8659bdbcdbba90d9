"""Independent agents of one device-mode run: seeds times the values of a swept field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax

from jaxflow.config.names import with_values

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
    """A copy of ``config`` whose swept fields hold the member's (traced) values."""
    return with_values(config, dict(hyper))
