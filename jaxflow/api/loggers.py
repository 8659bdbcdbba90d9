"""Results to experiment trackers: Weights & Biases and MLflow (``pip install 'jaxflow-rl[wandb]'``
or ``'jaxflow-rl[mlflow]'``), beside progress.jsonl and TensorBoard.

Each writer takes the run's config once, every numeric result of every iteration (nested
keys joined by ``/``, as in TensorBoard; stepped by env steps sampled) and each checkpoint
as an artifact. ``LOGGERS`` names what ``--logger`` accepts.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jaxflow.api.writers import _scalars
from jaxflow.config.constants import ENV_STEPS_SAMPLED
from jaxflow.config.fields import ConfigError

LOGGERS = ("tensorboard", "jsonl", "wandb", "mlflow")
DEFAULT_LOGGERS = ("tensorboard", "jsonl")
MLFLOW_STORE = "mlruns"
"""MLflow's local file store, inside the run directory, unless ``MLFLOW_TRACKING_URI`` names another."""


def parse_loggers(names: str) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` -> ``("tensorboard", "wandb")``; an unknown name is a :class:`ConfigError`."""
    chosen = tuple(n.strip() for n in names.split(",") if n.strip())
    unknown = [n for n in chosen if n not in LOGGERS]
    if unknown or not chosen:
        raise ConfigError(f"--logger takes a comma-separated list out of {list(LOGGERS)}, got {names!r}.")
    return chosen


def _step(result: Mapping[str, Any]) -> int:
    return int(result.get(ENV_STEPS_SAMPLED, result.get("training_iteration", 0)))


def _flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping) and v:
            out.update(_flat_config(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def tracker_module(module: str, extra: str) -> Any:
    """The tracker's package ``module``, imported; a :class:`ConfigError` naming the extra that installs it if absent."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"--logger {extra} needs the {module} package: pip install 'jaxflow-rl[{extra}]'.") from None


def quiet_wandb() -> Any:
    """wandb, imported with its console output off (``WANDB_SILENT``, unless set): set before
    W&B first reads its settings, which it keeps for the process."""
    os.environ.setdefault("WANDB_SILENT", "true")
    return tracker_module("wandb", "wandb")


def tracking_uri(logdir: str) -> str:
    """Where an MLflow run goes: ``MLFLOW_TRACKING_URI`` if set, else the file store ``logdir/mlruns``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or Path(os.path.abspath(logdir), MLFLOW_STORE).as_uri()


def is_file_store(uri: str) -> bool:
    """True for an MLflow tracking URI naming a local folder (``file:`` or a plain path)."""
    return urlsplit(uri).scheme in ("", "file")


class WandbWriter:
    """A Weights & Biases run: ``mode`` "online", "offline" (files under ``logdir/wandb``, for
    ``wandb sync`` later) or "disabled"; by default ``WANDB_MODE``, else online.

    Example:
        >>> writer = WandbWriter("runs/ppo", {"algorithm": "PPO", "config": {...}}, mode="offline")  # doctest: +SKIP
    """

    def __init__(self, logdir: str, config: Mapping[str, Any], mode: str | None = None, project: str = "jaxflow"):
        wandb = quiet_wandb()
        self._wandb = wandb
        with warnings.catch_warnings():
            # wandb.init starts W&B's service process: a fork that execs at once, not what JAX's warning means.
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            self.run = self._init(wandb, logdir, config, mode, project)

    @staticmethod
    def _init(wandb: Any, logdir: str, config: Mapping[str, Any], mode: str | None, project: str) -> Any:
        return wandb.init(
            project=os.environ.get("WANDB_PROJECT", project),
            name=os.path.basename(os.path.normpath(logdir)),
            dir=os.path.abspath(logdir),
            config=dict(config),
            mode=mode or os.environ.get("WANDB_MODE", "online"),
            reinit="create_new",
        )

    @property
    def where(self) -> str:
        """Where the run writes, for the line :func:`~jaxflow.api.loop.train` prints."""
        if self.run.disabled:
            return "W&B run disabled (WANDB_MODE=disabled): nothing is sent"
        if self.run.offline:  # run.dir is the run's folder's files/
            folder = os.path.dirname(self.run.dir)
            return f"W&B run offline in {folder} (`wandb sync {folder}` uploads it)"
        return f"W&B run at {self.run.url}"

    def write(self, result: Mapping[str, Any]) -> None:
        self.run.log(_scalars(result), step=_step(result))

    def checkpoint(self, path: str) -> None:
        artifact = self._wandb.Artifact(f"{self.run.id}-{os.path.basename(path)}", type="checkpoint")
        artifact.add_dir(path)
        self.run.log_artifact(artifact)

    def close(self) -> None:
        self.run.finish()
        # W&B's service (a separate process since wandb 0.31) may still be writing the run's
        # files when finish returns; teardown waits for it, so an offline run is complete on disk.
        self._wandb.teardown()


class MLflowWriter:
    """An MLflow run in experiment ``jaxflow``: the config as parameters (dotted names), the
    results as metrics, config.json and checkpoints as artifacts. The tracking store is
    :func:`tracking_uri`: ``MLFLOW_TRACKING_URI`` if set, else a local file store ``logdir/mlruns``.

    Example:
        >>> writer = MLflowWriter("runs/ppo", {"algorithm": "PPO", "config": {...}})  # doctest: +SKIP
    """

    def __init__(self, logdir: str, config: Mapping[str, Any], experiment: str = "jaxflow"):
        self.uri = tracking_uri(logdir)
        if is_file_store(self.uri):
            # MLflow keeps its file store (what the local runs need) behind this switch.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow = tracker_module("mlflow", "mlflow")
        self._client = mlflow.tracking.MlflowClient(self.uri)
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        self.run_id = self._client.create_run(
            experiment_id, run_name=os.path.basename(os.path.normpath(logdir))
        ).info.run_id
        params = [mlflow.entities.Param(k, str(v)) for k, v in _flat_config(config).items()]
        self._client.log_batch(self.run_id, params=params)
        self._metric = mlflow.entities.Metric
        self._logdir, self._experiment = logdir, experiment

    @property
    def where(self) -> str:
        """Where the run writes, for the line :func:`~jaxflow.api.loop.train` prints."""
        return f"MLflow run {self.run_id} (experiment {self._experiment}) at {self.uri}"

    def write(self, result: Mapping[str, Any]) -> None:
        now, step = int(time.time() * 1000), _step(result)
        metrics = [self._metric(k, v, now, step) for k, v in _scalars(result).items() if math.isfinite(v)]
        self._client.log_batch(self.run_id, metrics=metrics)

    def checkpoint(self, path: str) -> None:
        self._client.log_artifacts(self.run_id, path, artifact_path=os.path.basename(path))

    def close(self) -> None:
        config = os.path.join(self._logdir, "config.json")
        if os.path.exists(config):
            self._client.log_artifact(self.run_id, config)
        self._client.set_terminated(self.run_id)
