"""The training loop shared by the CLI and notebooks: stop conditions, writers, checkpoints."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from jaxflow.api.algorithm import Algorithm
from jaxflow.api.writers import ConsoleProgress, JsonLinesWriter, TensorBoardWriter
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import to_json_dict

STOP_KEYS = ("training_iteration", "env_steps_sampled", "episode_return_mean", "time_s")


def parse_stop(items: Sequence[str]) -> dict[str, float]:
    """``["episode_return_mean=450", ...]`` -> ``{"episode_return_mean": 450.0, ...}``."""
    stop: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in STOP_KEYS:
            raise ConfigError(f"--stop takes KEY=NUMBER with KEY one of {list(STOP_KEYS)}, got {item!r}.")
        try:
            stop[key] = float(value)
        except ValueError:
            raise ConfigError(f"--stop {key} needs a number, got {value!r}.") from None
    return stop


def should_stop(result: Mapping[str, Any], stop: Mapping[str, float]) -> bool:
    """True once any stop condition is met (``result[key] >= value``)."""
    return any(not math.isnan(float(result[k])) and float(result[k]) >= v for k, v in stop.items())


def train(
    algo: Algorithm,
    stop: Mapping[str, float],
    logdir: str | None = None,
    checkpoint_every: int = 10,
    verbose: bool = True,
) -> dict[str, Any]:
    """Trains until a stop condition holds; logs to ``logdir`` and checkpoints there
    every ``checkpoint_every`` iterations (0: only at the end) and at the end. A result of
    several iterations (device mode) checkpoints when it passes a multiple of ``checkpoint_every``."""
    if not stop:
        raise ConfigError(f"train() needs at least one stop condition out of {list(STOP_KEYS)}.")
    writers: list[Any] = []
    if logdir:
        os.makedirs(logdir, exist_ok=True)
        with open(os.path.join(logdir, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"algorithm": algo.spec.name, "config": to_json_dict(algo.config)}, f, indent=1)
        writers += [JsonLinesWriter(logdir), TensorBoardWriter(logdir)]
    if verbose:
        writers.append(ConsoleProgress(stop))
    result: dict[str, Any] = {}
    last_saved = algo.iteration
    try:
        while True:
            result = algo.train()
            for w in writers:
                w.write(result)
            if should_stop(result, stop):
                break
            if (
                logdir
                and checkpoint_every
                and result["training_iteration"] // checkpoint_every > last_saved // checkpoint_every
            ):
                algo.save(logdir)
                last_saved = result["training_iteration"]
        if logdir:
            algo.save(logdir)
    finally:
        for w in writers:
            w.close()
    return result
