"""Stop conditions: what a run can stop on, ``--stop KEY=VALUE`` parsed, the checks of each
condition (alone, against the run's config, against a resumed run's counters) and the test a
result meets. The checks run before anything starts: a condition that could never hold would
otherwise train forever, since any ``--stop`` replaces the default one.

>>> parse_stop(["training_iteration=3", "episode_return_mean=450"])
{'training_iteration': 3.0, 'episode_return_mean': 450.0}
>>> should_stop({"training_iteration": 3}, {"training_iteration": 3.0})
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from jaxflow.config.fields import ConfigError

EVALUATION = "evaluation/"
"""The prefix of the stop keys an evaluation during training reports (``evaluation_interval``)."""

STOP_KEYS = (
    "training_iteration",
    "env_steps_sampled",
    "episode_return_mean",
    "time_s",
    EVALUATION + "episode_return_mean",
)
"""What a run can stop on; ``evaluation/...`` (with ``evaluation_interval`` set) once an evaluation reports it."""
STOPPED_BY = "stopped_by"
"""The result key naming what asked a run to stop besides its conditions: a callback whose
``on_train_result`` returned True (:mod:`jaxflow.api.callbacks`); :func:`should_stop` then holds."""
COUNTER_KEYS = ("training_iteration", "env_steps_sampled", "time_s")
"""Stop keys that only grow from 0: a bound at or below 0 would stop after the first iteration,
and a resumed run's bound at or below its own count after the next one."""
WHOLE_KEYS = {"training_iteration": "iterations", "env_steps_sampled": "env steps"}
"""Counters of whole things, and what they count: their bounds are integers."""
DEFAULT_ITERATIONS = 100
"""The training iteration ``jaxflow train`` stops at where no ``--stop`` is given."""
DEFAULT_STOP = {"training_iteration": float(DEFAULT_ITERATIONS)}
"""``jaxflow train``'s stop condition where no ``--stop`` is given (any ``--stop`` replaces it)."""
DEFAULT_STOP_NOTE = (
    f"jaxflow: no --stop given: the run stops at training iteration {DEFAULT_ITERATIONS} (the default); "
    "--stop KEY=VALUE stops it on another condition, e.g. --stop training_iteration=500 or "
    "--stop episode_return_mean=450"
)
"""What ``jaxflow train`` says (unless ``--quiet``) when it stops on :data:`DEFAULT_STOP`."""


def parse_stop(items: Sequence[str]) -> dict[str, float]:
    """``["episode_return_mean=450", ...]`` -> ``{"episode_return_mean": 450.0, ...}``, checked by :func:`check_stop`."""
    stop: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in STOP_KEYS:
            raise ConfigError(f"--stop takes KEY=NUMBER with KEY one of {list(STOP_KEYS)}, got {item!r}.")
        if key in stop:
            raise ConfigError(f"--stop {key} is given twice ({stop[key]:g} and {value.strip()}); give it once.")
        try:
            stop[key] = float(value)
        except ValueError:
            raise ConfigError(f"--stop {key} needs a number, got {value!r}.") from None
    check_stop(stop)
    return stop


def check_stop(stop: Mapping[str, float]) -> None:
    """Raises :class:`ConfigError` for an unknown key, a value that is no finite number, a
    counter's bound at or below 0, or a bound on a counter of whole things that is no integer."""
    for key, value in stop.items():
        if key not in STOP_KEYS:
            raise ConfigError(f"stop condition {key!r} is not one of {list(STOP_KEYS)}.")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"--stop {key} needs a finite number, got {value!r}.")
        if key in COUNTER_KEYS and value <= 0:
            raise ConfigError(f"--stop {key} must be above 0 (it counts up from 0), got {value:g}.")
        if key in WHOLE_KEYS and not float(value).is_integer():
            raise ConfigError(f"--stop {key} counts whole {WHOLE_KEYS[key]}: give an integer, got {value:g}.")


def check_reported(stop: Mapping[str, float], config: Any) -> None:
    """Raises :class:`ConfigError` for a stop key the run configured by ``config`` never
    reports: an ``evaluation/`` key without evaluation during training."""
    evaluated = [key for key in stop if key.startswith(EVALUATION)]
    interval: int = getattr(config, "evaluation_interval", 0)
    if not evaluated or interval:
        return
    name = type(config).__name__
    if not hasattr(config, "evaluation_interval"):
        raise ConfigError(
            f"--stop {evaluated[0]}: a {name} run does not evaluate during training; stop on another key."
        )
    raise ConfigError(
        f"--stop {evaluated[0]}: this run never evaluates ({name}.evaluation_interval is 0), so it would never stop; "
        "add --set evaluation_interval=N to evaluate every N iterations."
    )


def check_ahead(stop: Mapping[str, float], counters: Mapping[str, Any], checkpoint: str) -> None:
    """Raises :class:`ConfigError` for a counter's bound that the run resumed from
    ``checkpoint`` (its ``counters``) has reached already: it would train one more iteration
    and stop, past its bound."""
    for key in COUNTER_KEYS:
        at = counters.get(key)
        if key in stop and isinstance(at, (int, float)) and at >= stop[key]:
            raise ConfigError(
                f"--stop {key}={stop[key]:g}: the run is already at {key} {at:g} ({checkpoint}); "
                f"give a bound above {at:g} to train on."
            )


def should_stop(result: Mapping[str, Any], stop: Mapping[str, float]) -> bool:
    """True once any stop condition is met (``result[key] >= value``; a nested key such as
    ``evaluation/episode_return_mean`` where that result has it), or a callback asked the run to
    stop (the result names it under :data:`STOPPED_BY`)."""
    if result.get(STOPPED_BY):
        return True
    for key, bound in stop.items():
        value: Any = result
        for part in key.split("/"):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None and not math.isnan(float(value)) and float(value) >= bound:
            return True
    return False
