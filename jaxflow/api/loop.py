"""The training loop shared by the CLI and notebooks: stop conditions, writers, checkpoints."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from jaxflow.api.algorithm import Algorithm
from jaxflow.api.logdir import CONFIG, claim_logdir, truncate_progress
from jaxflow.api.loggers import DEFAULT_LOGGERS, MLflowWriter, WandbWriter, parse_loggers
from jaxflow.api.retention import DEFAULT_KEEP, prune_checkpoints
from jaxflow.api.storage import Storage
from jaxflow.api.writers import ConsoleProgress, JsonLinesWriter, TensorBoardWriter, tensorboard_step
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import to_json_dict

STOP_KEYS = (
    "training_iteration",
    "env_steps_sampled",
    "episode_return_mean",
    "time_s",
    "evaluation/episode_return_mean",
)
"""What a run can stop on; ``evaluation/...`` (with ``evaluation_interval`` set) once an evaluation reports it."""
COUNTER_KEYS = ("training_iteration", "env_steps_sampled", "time_s")
"""Stop keys that only grow from 0: a bound at or below 0 would stop after the first iteration."""


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
    """Raises :class:`ConfigError` for an unknown key, a value that is no finite number, or a
    counter's bound at or below 0."""
    for key, value in stop.items():
        if key not in STOP_KEYS:
            raise ConfigError(f"stop condition {key!r} is not one of {list(STOP_KEYS)}.")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"--stop {key} needs a finite number, got {value!r}.")
        if key in COUNTER_KEYS and value <= 0:
            raise ConfigError(f"--stop {key} must be above 0 (it counts up from 0), got {value:g}.")


def should_stop(result: Mapping[str, Any], stop: Mapping[str, float]) -> bool:
    """True once any stop condition is met (``result[key] >= value``; a nested key such as
    ``evaluation/episode_return_mean`` where that result has it)."""
    for key, bound in stop.items():
        value: Any = result
        for part in key.split("/"):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None and not math.isnan(float(value)) and float(value) >= bound:
            return True
    return False


def train(
    algo: Algorithm,
    stop: Mapping[str, float],
    logdir: str | None = None,
    checkpoint_every: int = 10,
    verbose: bool = True,
    overwrite: bool = False,
    loggers: Sequence[str] = DEFAULT_LOGGERS,
    keep_checkpoints: int = DEFAULT_KEEP,
    storage: str | Storage | None = None,
) -> dict[str, Any]:
    """Trains until a stop condition holds; logs to ``logdir`` and checkpoints there
    every ``checkpoint_every`` iterations (0: only at the end) and at the end. A result of
    several iterations (device mode) checkpoints when it passes a multiple of ``checkpoint_every``.

    A new run (``algo`` at iteration 0) refuses a ``logdir`` that holds a run, unless
    ``overwrite`` replaces that run's files (a new run's option only). A restored run (iteration N > 0) continues the
    logs there: rows of ``progress.jsonl`` past N are dropped and TensorBoard purges the steps
    after the checkpoint's, so every iteration and step is logged once. ``loggers`` (out of
    :data:`~jaxflow.api.loggers.LOGGERS`) choose where results go besides the console. After
    each save only the newest ``keep_checkpoints`` checkpoints and the best one stay (0: all;
    see :mod:`~jaxflow.api.retention`). ``storage`` (a URI or a :class:`~jaxflow.api.storage.Storage`)
    receives a copy of ``logdir``'s run after every checkpoint and at the end; a new run
    refuses a storage that holds one unless ``overwrite``.
    """
    loggers = _checked_arguments(stop, loggers, checkpoint_every, keep_checkpoints, storage, logdir)
    store = Storage(storage) if isinstance(storage, str) else storage
    if store is not None and algo.iteration == 0:
        store.claim(overwrite)  # before the local logdir is touched: a refused run changes nothing
    writers: list[Any] = _log_writers(algo, logdir, overwrite, loggers) if logdir else []
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
                _save(algo, logdir, writers, keep_checkpoints, store)
                last_saved = result["training_iteration"]
        if logdir:
            _save(algo, logdir, writers, keep_checkpoints)
    finally:
        for w in writers:
            w.close()
        if store is not None and logdir:
            store.push(logdir)  # the final checkpoint, and the logs of a run that failed, too
    return result


def _checked_arguments(
    stop: Mapping[str, float],
    loggers: Sequence[str],
    checkpoint_every: int,
    keep_checkpoints: int,
    storage: str | Storage | None,
    logdir: str | None,
) -> Sequence[str]:
    """Checks :func:`train`'s arguments in their order, each refusal a one-line
    :class:`ConfigError`; returns the ``loggers`` parsed."""
    if not stop:
        raise ConfigError(f"train() needs at least one stop condition out of {list(STOP_KEYS)}.")
    check_stop(stop)
    parsed = parse_loggers(",".join(loggers)) if loggers else ()
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be an int >= 0 (0: at the end only), got {checkpoint_every!r}.")
    if isinstance(keep_checkpoints, bool) or not isinstance(keep_checkpoints, int) or keep_checkpoints < 0:
        raise ConfigError(f"keep_checkpoints must be an int >= 0 (0: all), got {keep_checkpoints!r}.")
    if storage is not None and not logdir:
        raise ConfigError("train(storage=...) copies a logdir there: give a logdir too.")
    return parsed


def _save(algo: Algorithm, logdir: str, writers: Sequence[Any], keep: int, store: Storage | None = None) -> None:
    path = algo.save(logdir)
    for w in writers:
        if hasattr(w, "checkpoint"):  # trackers keep checkpoints as artifacts
            w.checkpoint(path)
    prune_checkpoints(logdir, keep)
    if store is not None:
        store.push(logdir)


def _log_writers(algo: Algorithm, logdir: str, overwrite: bool, loggers: Sequence[str]) -> list[Any]:
    """Claims ``logdir`` for a new run, or continues a restored run's logs there; writes
    ``config.json`` and opens the ``loggers``' writers."""
    purge_step = None
    if algo.iteration and overwrite:  # its checkpoints may be the ones overwrite would remove
        raise ConfigError(
            f"overwrite=True starts a new run in {logdir!r}; this algorithm continues one at iteration "
            f"{algo.iteration} (train it into its own run's logdir, or a new one)."
        )
    if algo.iteration == 0:
        claim_logdir(logdir, overwrite)
    else:
        os.makedirs(logdir, exist_ok=True)
        truncate_progress(logdir, algo.iteration)
        # The restored step was written before the checkpoint; the next result's is later.
        purge_step = tensorboard_step(algo.context.counters) + 1
    saved = {"algorithm": algo.spec.name, "config": to_json_dict(algo.config)}
    with open(os.path.join(logdir, CONFIG), "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=1)
    make = {
        "jsonl": lambda: JsonLinesWriter(logdir),
        "tensorboard": lambda: TensorBoardWriter(logdir, purge_step),
        "wandb": lambda: WandbWriter(logdir, saved),
        "mlflow": lambda: MLflowWriter(logdir, saved),
    }
    return [make[name]() for name in loggers]
