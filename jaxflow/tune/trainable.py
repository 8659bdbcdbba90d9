"""Every jaxflow algorithm as a Ray Tune trainable: one :class:`~jaxflow.api.Algorithm` per
trial, one ``train()`` per Tune step, jaxflow's checkpoints as Tune's checkpoints, and the
trial's placement group sized from its config so that its rollout workers and replay
shards run in resources Tune reserved for it."""

from __future__ import annotations

import logging
import os
import posixpath
from typing import Any, ClassVar

import pyarrow.fs
from ray import tune

from jaxflow.api.algorithm import Algorithm
from jaxflow.api.program import resolve_mode
from jaxflow.api.registry import get_algorithm, spec_of
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.api.user_modules import import_from, imported_modules, module_roots
from jaxflow.config.names import make_config, replace_config
from jaxflow.dataflow.placement import Placement
from jaxflow.rollout.worker_set import worker_placement

DRIVER_BUNDLE = {"CPU": 1.0}
"""What a trial's own process asks for: the learner (and, with ``num_workers=0``, the sampling)."""
TRIAL_LOGGERS = ("ray.train", "ray.tune")
"""Loggers of Ray's that a trial's process quiets to warnings (:func:`quiet_trial_logs`)."""
GROUP_STRATEGIES = {"pack": "PACK", "spread": "SPREAD"}
"""The trial's placement-group strategy for each ``placement_strategy`` its workers have."""


class JaxflowTrainable(tune.Trainable):
    """A Tune trainable of one algorithm: ``_algorithm`` (a name or a config) and ``_fixed``
    settings, which each trial's config (its sampled fields, flat or dotted names) extends.
    Made by :func:`trainable`, which sets both."""

    _algorithm: ClassVar[Any] = None
    _spec: ClassVar[AlgorithmSpec]
    _fixed: ClassVar[dict[str, Any]] = {}
    _imports: ClassVar[list[str]] = []
    _import_roots: ClassVar[list[str]] = []

    @classmethod
    def run_config(cls, config: dict[str, Any]) -> Any:
        """The jaxflow config a trial with Tune config ``config`` runs, validated."""
        fields = {**cls._fixed, **config}
        if isinstance(cls._algorithm, str):
            return make_config(cls._spec.config_cls, **fields)
        return replace_config(cls._algorithm, **fields)

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> tune.PlacementGroupFactory:
        return placement_for(cls.run_config(config), cls._spec)

    def setup(self, config: dict[str, Any]) -> None:
        quiet_trial_logs()
        # The user's modules (--import): their envs and models registered in this process too,
        # and remembered by the trial's checkpoints, as a `jaxflow train` run's are.
        import_from(self._imports, self._import_roots)
        self.algo = Algorithm(self.run_config(config), self._spec)

    def step(self) -> dict[str, Any]:
        result = dict(self.algo.train())
        result["pid"] = os.getpid()  # which process ran it (a restored trial runs in a new one)
        # Tune reads the newest evaluation, `evaluation`; its TensorBoard logger would take the
        # list of them for a histogram and warn.
        result.pop("evaluations", None)
        return result

    def save(self, checkpoint_dir: str | None = None) -> Any:
        """Tune's save, never into a checkpoint folder the trial already wrote.

        Tune's synchronous PBT can pause a running trial with two saves in flight (its own
        and the pause's) and count one: the trial's next process is then told an index one
        short and would persist its next checkpoint over the second, under a name Tune still
        holds for the older state (a trial that exploited it loads a later state)."""
        if self._storage is not None:
            skip_written_checkpoints(self._storage)
        return super().save(checkpoint_dir)

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.algo.save(checkpoint_dir)  # checkpoint_dir/checkpoint_<N>: Algorithm.restore(checkpoint_dir) finds it

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.algo.load(checkpoint)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """A reused trial process (``reuse_actors``, PBT's exploit) runs a new config: a new run."""
        self.algo.stop()
        self.algo = Algorithm(self.run_config(new_config), self._spec)
        self.config = new_config
        return True

    def cleanup(self) -> None:
        self.algo.stop()


def skip_written_checkpoints(storage: Any) -> None:
    """Moves ``storage``'s (a Ray ``StorageContext``) checkpoint index past every folder
    its trial already persisted, so that the next save makes a new one."""
    while True:
        name = f"checkpoint_{storage.current_checkpoint_index + 1:06d}"
        info = storage.storage_filesystem.get_file_info(posixpath.join(storage.trial_fs_path, name))
        if info.type == pyarrow.fs.FileType.NotFound:
            return
        storage.current_checkpoint_index += 1


def trainable(algorithm: str | Any, **fixed: Any) -> type[JaxflowTrainable]:
    """A Tune trainable running ``algorithm`` (a name or a config object) with ``fixed``
    settings (flat or dotted names); each trial's config adds the searched ones. The user's
    modules imported so far (``--import``, :func:`~jaxflow.api.import_modules`) are imported in
    each trial's process too.

    Example:
        >>> from ray import tune
        >>> tuner = tune.Tuner(  # doctest: +SKIP
        ...     jaxflow.tune.trainable("PPO", env="CartPole-v1", num_workers=0),
        ...     param_space={"lr": tune.loguniform(1e-4, 1e-2)},
        ...     tune_config=tune.TuneConfig(num_samples=8, scheduler=tune.schedulers.ASHAScheduler()),
        ... )
        >>> trainable("PPO", env="CartPole-v1").run_config({"lr": 0.01}).optimizer.lr
        0.01
    """
    spec = get_algorithm(algorithm) if isinstance(algorithm, str) else spec_of(algorithm)
    if isinstance(algorithm, str):
        make_config(spec.config_cls, **fixed)  # a bad setting fails here, not in every trial
    else:
        replace_config(algorithm, **fixed)
    imports = imported_modules()
    attributes = {
        "_algorithm": algorithm,
        "_spec": spec,
        "_fixed": dict(fixed),
        "_imports": imports,
        "_import_roots": module_roots(imports),
        "__module__": __name__,
    }
    return type(spec.name, (JaxflowTrainable,), attributes)


def quiet_trial_logs() -> None:
    """Only warnings from Ray Train and Tune in a trial's process: their info lines (each
    checkpoint written, a setup that took JAX's compile time) would reach the terminal from
    every trial, through Ray's log forwarding."""
    for name in TRIAL_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def placement_for(config: Any, spec: AlgorithmSpec) -> tune.PlacementGroupFactory:
    """A trial's placement group for ``config`` of algorithm ``spec``: the driver's bundle, then
    one bundle per rollout worker and per replay shard as they ask for them (none in device mode).

    >>> spec = get_algorithm("PPO")
    >>> placement_for(make_config(spec.config_cls, num_workers=2), spec).bundles
    [{'CPU': 1.0}, {'CPU': 1.0}, {'CPU': 1.0}]
    """
    bundles = [dict(DRIVER_BUNDLE)]
    rollout = getattr(config, "rollout", None)
    if rollout is not None and resolve_mode(config, spec) == "ray":
        bundles += [worker_placement(rollout).request()] * rollout.num_workers
        shard = Placement(getattr(config, "num_cpus_per_replay_shard", 0.0), resources=_shard_resources(config))
        bundles += [shard.request()] * getattr(config, "num_replay_shards", 0)
    strategy = GROUP_STRATEGIES[rollout.placement_strategy] if rollout is not None else "PACK"
    return tune.PlacementGroupFactory([b for b in bundles if b], strategy=strategy)


def _shard_resources(config: Any) -> dict[str, float]:
    return dict(getattr(config, "custom_resources_per_replay_shard", None) or {})
