"""``jaxflow train --config FILE``: a run's flags read from a JSON file (the tuned examples in
``examples/tuned/``).

A run file is a JSON object whose keys are ``train``'s flags (``num_workers`` or ``num-workers``),
plus ``description``, ``reaches`` (what the run is stated to reach, checked by the tests) and
``reference`` (the published figure a row of ``docs/results.md`` sets it beside, read by
``benchmarks/reproduce.py``):

.. code-block:: json

    {"algo": "DQN", "env": "CartPole-v1", "seed": 0, "set": {"lr": 0.0005, "hidden_sizes": [64, 64]},
     "stop": {"episode_return_mean": 450, "env_steps_sampled": 100000}}

``set`` and ``stop`` are objects; a list is a comma-separated value; ``true`` gives a switch
(``"overwrite": true``). The file becomes command-line arguments placed before the ones given,
so a flag given on the command line overrides the file's (and ``--set``/``--stop`` keys given there
replace the file's).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from jaxflow.api.user_errors import UsageError
from jaxflow.config.fields import ConfigError

KEY_VALUE_FLAGS = ("FIELD=VALUE", "KEY=VALUE")
"""The metavars of the repeatable flags a run file gives as an object (``set``, ``stop``)."""

ABOUT_KEYS = ("description", "reaches", "reference")
"""A run file's keys that describe the run rather than set a flag."""

NOT_IN_FILES = ("config", "resume", "debug")
"""Flags a run file may not give: another file, a resume (a run's own checkpoint decides it), tracebacks."""


def run_file_arguments(path: str, train: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """A run file's flags as ``train`` arguments (each flag with its value, or a switch alone),
    checked by ``train`` (the ``jaxflow train`` parser) as if typed; :class:`ConfigError` names the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--config {path}: cannot read it as JSON ({e}).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a JSON object of train's flags, got {type(data).__name__}.")
    actions = {  # by flag name (num_workers for --num-workers, import for --import)
        flag.lstrip("-").replace("-", "_"): a for a in train._actions for flag in a.option_strings
    }
    allowed = sorted(set(actions) - set(NOT_IN_FILES) - {"help", "h"})
    out: list[tuple[str, ...]] = []
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest in ABOUT_KEYS:
            continue
        if dest not in allowed:
            raise ConfigError(f"--config {path}: {key!r} is not a flag a run file may give; allowed: {allowed}.")
        out += _as_arguments(path, key, actions[dest], value)
    try:
        train.parse_args([a for flag in out for a in flag])
    except UsageError as e:
        raise ConfigError(f"--config {path}: {e}") from None
    return out


def _as_arguments(path: str, key: str, action: argparse.Action, value: Any) -> list[tuple[str, ...]]:
    flag = action.option_strings[0]
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise ConfigError(f"--config {path}: {key!r} is a switch; give true or false, got {value!r}.")
        return [(flag,)] if value else []
    if isinstance(action, argparse._AppendAction) and action.metavar in KEY_VALUE_FLAGS:  # --set, --stop
        if not isinstance(value, dict):
            raise ConfigError(f"--config {path}: {key!r} takes an object of KEY: VALUE, got {value!r}.")
        return [(flag, f"{k}={_text(v)}") for k, v in value.items()]
    if isinstance(action, argparse._AppendAction):  # --import: a list of values (or one)
        return [(flag, _text(v)) for v in (value if isinstance(value, list) else [value])]
    return [(flag, _text(value))]


def _text(value: Any) -> str:
    """A JSON value as command-line text: strings as they are, lists comma-separated, objects as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return json.dumps(value)
