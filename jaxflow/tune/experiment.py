"""A Tune experiment of one algorithm, as ``jaxflow tune`` runs it: the scheduler by name, the
Tuner over :func:`~jaxflow.tune.trainable.trainable`, the results table, and the best trial's
checkpoint named in ``best_checkpoint.json`` in the experiment directory."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ray import cloudpickle, tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

from jaxflow.api import checkpoint
from jaxflow.api.retention import BEST_FILE, DEFAULT_KEEP
from jaxflow.api.stops import should_stop
from jaxflow.config.fields import ConfigError
from jaxflow.tune.search import KeepInBounds, SearchDim
from jaxflow.tune.trainable import trainable

SCHEDULERS = ("fifo", "asha", "pbt")
"""Schedulers by name: every trial to its stop (FIFO), asynchronous successive halving (Li et
al. 2018), population-based training (Jaderberg et al. 2017)."""
METRIC = "episode_return_mean"
"""What trials are ranked by (higher is better)."""
ASHA_REDUCTION = 2
"""ASHA keeps the best 1/2 of the trials at each rung (rungs at ``grace_period * 2**k``)."""
SILENT = 0
"""Tune's verbosity: its own tables off; ``jaxflow tune`` prints one at the end."""


def make_scheduler(
    name: str,
    dims: Sequence[SearchDim],
    stop: Mapping[str, float],
    interval: int,
    config_cls: type,
    synch: bool = False,
) -> Any:
    """The scheduler ``name`` (out of :data:`SCHEDULERS`): ASHA up to ``stop``'s
    ``training_iteration``, first cut at ``interval``; PBT perturbing the sampled ``dims``
    every ``interval`` iterations, within the bounds ``config_cls`` validates
    (:class:`~jaxflow.tune.search.KeepInBounds`), each trial on its own when it gets there
    or, with ``synch``, all of them together once every one has (Tune's synchronous PBT: no
    trial ahead of the others finds nobody to rank against). Raises :class:`ConfigError` for
    what it cannot run."""
    if name not in SCHEDULERS:
        raise ConfigError(f"--scheduler {name!r} is not one of {list(SCHEDULERS)}.")
    if name == "fifo":
        return FIFOScheduler()
    if name == "asha":
        max_t = int(stop.get("training_iteration", 0))
        if not max_t or interval > max_t:
            raise ConfigError(
                "--scheduler asha needs --stop training_iteration=N (its longest trial) and "
                f"--scheduler-interval at most N (its first cut), got {dict(stop)} and {interval}."
            )
        return ASHAScheduler(max_t=max_t, grace_period=interval, reduction_factor=ASHA_REDUCTION)
    grid = [d.field for d in dims if d.kind == "grid_search"]
    if grid or not dims:
        raise ConfigError(
            "--scheduler pbt perturbs sampled fields: give --search with choice, uniform, loguniform or randint"
            + (f" (not grid_search: {grid})." if grid else ".")
        )
    return PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=interval,
        hyperparam_mutations={d.field: list(d.values) if d.kind == "choice" else d.domain() for d in dims},
        custom_explore_fn=KeepInBounds(config_cls, [d.field for d in dims]),
        synch=synch,
    )


def tuner(
    algorithm: str | Any,
    fixed: Mapping[str, Any],
    dims: Sequence[SearchDim],
    num_samples: int,
    scheduler: Any,
    stop: Mapping[str, float],
    logdir: str,
    checkpoint_every: int,
    max_failures: int = 0,
    callbacks: Sequence[Any] = (),
) -> tune.Tuner:
    """A Tuner of ``algorithm`` with ``fixed`` settings over ``dims``, its experiment in
    ``logdir``, each trial stopped by ``stop`` (jaxflow's stop conditions) and checkpointed
    every ``checkpoint_every`` iterations and at its end (the newest ``DEFAULT_KEEP`` kept),
    and restarted from its last checkpoint up to ``max_failures`` times if its process dies."""
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig

    return tune.Tuner(
        trainable(algorithm, **fixed),
        param_space={d.field: d.domain() for d in dims},
        tune_config=tune.TuneConfig(
            metric=METRIC, mode="max", num_samples=num_samples, scheduler=scheduler, reuse_actors=True
        ),
        run_config=RunConfig(
            name=os.path.basename(os.path.abspath(logdir)),
            storage_path=os.path.dirname(os.path.abspath(logdir)),
            stop=lambda _, result: should_stop(result, stop),
            checkpoint_config=CheckpointConfig(
                num_to_keep=DEFAULT_KEEP, checkpoint_frequency=checkpoint_every, checkpoint_at_end=True
            ),
            failure_config=FailureConfig(max_failures=max_failures),
            callbacks=list(callbacks),
            verbose=SILENT,
        ),
    )


def best_checkpoint(results: Any, logdir: str) -> dict[str, Any] | None:
    """Writes :data:`~jaxflow.api.retention.BEST_FILE` in ``logdir``: the best trial's last
    checkpoint (by its last :data:`METRIC`; jaxflow's ``checkpoint_<N>`` inside Tune's folder,
    what ``Algorithm.restore`` and ``jaxflow evaluate`` take), its score, trial id and searched
    config; returns what it wrote, or None when no trial reported the metric."""
    ranked = [r for r in trials(results) if r.checkpoint is not None and _finite(r.metrics.get(METRIC))]
    if not ranked:
        return None
    best = max(ranked, key=lambda r: r.metrics[METRIC])
    out = {
        "checkpoint": checkpoint.search(best.checkpoint.path).path,  # jaxflow's, inside Tune's
        "score": float(best.metrics[METRIC]),
        "trial": best.metrics.get("trial_id"),
        "config": best.config,
    }
    tmp = os.path.join(logdir, f".{BEST_FILE}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, os.path.join(logdir, BEST_FILE))
    return out


def results_table(results: Any, fields: Sequence[str], stop: Mapping[str, float]) -> str:
    """One row per trial: its id, searched ``fields``, last and best :data:`METRIC`, iterations
    and status (``done``: its last result met ``stop``; ``cut``: the scheduler stopped it
    first; ``error``)."""
    head = ["trial", *fields, "last return", "best return", "iterations", "status"]
    rows = [head]
    for r in sorted(trials(results), key=lambda r: str(r.metrics.get("trial_id"))):
        history = r.metrics_dataframe
        returns = [] if history is None or METRIC not in history else [v for v in history[METRIC] if _finite(v)]
        rows.append(
            [
                str(r.metrics.get("trial_id", "?")),
                *(searched_value(r.config.get(f)) for f in fields),
                f"{returns[-1]:.1f}" if returns else "-",
                f"{max(returns):.1f}" if returns else "-",
                str(r.metrics.get("training_iteration", 0)),
                "error" if r.error is not None else "done" if should_stop(r.metrics, stop) else "cut",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


class TrialLines(tune.Callback):
    """One line per trial as it ends, while the others run (Tune's own output is off): its id,
    searched ``fields``, last :data:`METRIC`, iterations, status (as :func:`results_table`'s,
    judged by ``stop``) and jaxflow checkpoint; or its error (:func:`describe_error`)."""

    def __init__(self, fields: Sequence[str], stop: Mapping[str, float]):
        self.fields, self.stop = list(fields), dict(stop)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        result = trial.last_result
        score = result.get(METRIC)
        print(
            f"jaxflow: trial {trial.trial_id} {'done' if should_stop(result, self.stop) else 'cut'}: "
            f"{self._searched(trial)}return {f'{score:.1f}' if _finite(score) else '-'}, "
            f"{result.get('training_iteration', 0)} iterations, checkpoint {_jaxflow_checkpoint(trial.checkpoint)}",
            flush=True,
        )

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        print(
            f"jaxflow: trial {trial.trial_id} failed: {self._searched(trial)}"
            f"{trial.last_result.get('training_iteration', 0)} iterations: {describe_error(_trial_error(trial))}",
            flush=True,
        )

    def _searched(self, trial: Any) -> str:
        return "".join(f"{f}={searched_value(trial.config.get(f))}, " for f in self.fields)


def searched_value(value: Any) -> str:
    """A searched field's value as the table and the trial lines show it (floats to 4 digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def describe_error(error: Any) -> str:
    """A trial's error in one line: the error raised in the trial's process (a Ray task error's
    ``cause``: Ray's own first line names only the actor), its type and its message's first line."""
    cause = getattr(error, "cause", None) or error
    said = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
    return f"{type(cause).__name__}: {said}" if isinstance(cause, BaseException) else said


def _trial_error(trial: Any) -> Any:
    """The error that just ended ``trial``: the exception Tune pickled in the trial's folder on this
    machine (its copy in the experiment's storage comes later), else Tune's text of it."""
    path = trial.pickled_error_file
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return cloudpickle.load(f)
    return trial.get_error()


def _jaxflow_checkpoint(found: Any) -> str:
    """The jaxflow checkpoint inside Tune's checkpoint ``found`` (its folder where none verifies; ``-``: none)."""
    if found is None:
        return "-"
    try:
        return checkpoint.search(found.path, warn=False).path
    except checkpoint.CheckpointError:
        return found.path


def trials(results: Any) -> list[Any]:
    """A ``ResultGrid``'s results, one per trial."""
    return [results[i] for i in range(len(results))]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
