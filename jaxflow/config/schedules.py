"""Schedules of numeric config fields over the learner's optimizer steps.

``schedules={"lr": [[0, 3e-4], [100000, 0.0]], "ent_coef": [[0, 0.01], [50000, 0.001]]}``:
each named float field (flat or dotted name) follows the piecewise-linear curve through
its ``[optimizer step, value]`` points, and holds the first and last values before the
first and after the last point (RLlib's ``lr_schedule``/``entropy_coeff_schedule`` format,
over optimizer steps as optax's schedules count, not env steps). The learning rate goes to
the optimizer as an optax schedule; every other field reaches the loss as the value at the
train state's step (see :mod:`jaxflow.learn.schedules`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxflow.config.fields import POSITIVE, _type_ok, require
from jaxflow.config.names import field_check, field_type, flat_names, is_field, replace_config, resolve

Points = Sequence[Sequence[float]]

OPTIMIZER_FIELDS = ("lr", "max_grad_norm")
"""Scheduled in the optimizer, as optax schedules of its update count."""


def float_fields(cls: type) -> list[str]:
    """The flat names of ``cls``'s float fields: those a sweep or a schedule can vary."""
    return [f for f in flat_names(cls) if field_type(cls, resolve(cls, f)) is float]


def perturbable(cls: type) -> list[str]:
    """The fields population-based training may perturb: the float fields of ``cls`` itself and
    of its optimizer, which the compiled update reads (rollout and device-mode settings are
    the run's, not a member's)."""
    return [f for f in float_fields(cls) if resolve(cls, f)[0] not in ("rollout", "device")]


def schedulable(cls: type) -> list[str]:
    """The fields of config class ``cls`` that ``schedules`` may name: the optimizer's and
    the float fields only its loss reads (``cls.loss_fields``)."""
    return [*OPTIMIZER_FIELDS, *cls.loss_fields]  # type: ignore[attr-defined]  # a CommonConfig subclass


def validate_schedules(config: Any) -> None:
    """Each schedule names a float field, is not swept too, and has ``[step, value]`` points
    with integer steps that increase and values valid where the field itself is set."""
    schedules: Mapping[str, Points] = config.schedules
    name = type(config).__name__
    for field, points in schedules.items():
        allowed = schedulable(type(config))
        require(
            is_field(type(config), field)
            and resolve(type(config), field) in [resolve(type(config), f) for f in allowed],
            f"{name}.schedules: {field!r} cannot follow a schedule; {name}'s fields that can: {', '.join(allowed)}.",
        )
        require(
            all(resolve(type(config), field) != resolve(type(config), s) for s in config.device.sweep),
            f"{name}.schedules: {field!r} is also swept; a field is either swept or scheduled.",
        )
        require(
            isinstance(points, (list, tuple))
            and len(points) > 0
            and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in points),
            f"{name}.schedules[{field!r}] must be a non-empty list of [optimizer step, value] pairs, got {points!r}.",
        )
        steps = [p[0] for p in points]
        require(
            all(_type_ok(s, float) and s >= 0 and float(s).is_integer() for s in steps)
            and list(steps) == sorted(set(steps)),
            f"{name}.schedules[{field!r}]: the steps must be non-negative integers in increasing order, got {steps}.",
        )
        for _, value in points:  # each value must be valid where the field itself is set
            require(_type_ok(value, float), f"{name}.schedules[{field!r}]: {value!r} is not a number.")
            if value == 0 and _positive(type(config), field):
                continue  # annealed to zero (a learning rate's usual end): no value the field itself takes
            replace_config(config, schedules={}, **{field: float(value)})


def _positive(cls: type, field: str) -> bool:
    """Whether ``field`` must be greater than zero (its check is :data:`POSITIVE`)."""
    return field_check(cls, field) == POSITIVE
