"""MAML's settings: the task distribution, the meta-batch, the inner step and the meta-update's
Adam (Finn, Abbeel & Levine, 2017, Algorithm 3)."""

from __future__ import annotations

import dataclasses

from jaxflow import CommonConfig, envs
from jaxflow.config import OptimizerConfig
from jaxflow.config.fields import POSITIVE, SIZE, ConfigError, param, require


@dataclasses.dataclass(frozen=True)
class MAMLConfig(CommonConfig):
    """MAML settings (plus :class:`~jaxflow.config.CommonConfig`; of its rollout fields only
    ``num_workers`` and ``num_cpus_per_worker`` apply, in Ray mode)."""

    on_policy = True

    env: str = "tasks/PointNavigation-v0"
    """Task distribution id, one of :func:`envs.tasks.list_task_distributions`; ``env_config``
    goes to its constructor (e.g. ``{"horizon": 50}``)."""
    meta_batch_size: int = param(20, SIZE)
    """Tasks per meta-iteration."""
    episodes_per_task: int = param(10, SIZE)
    """Episodes per task in each phase, before and after adaptation (at least 2: the baseline
    is the other episodes' mean)."""
    inner_lr: float = param(0.1, POSITIVE)
    """Step size alpha of the inner SGD steps."""
    inner_steps: int = param(1, SIZE)
    """Inner gradient steps, all on the pre-adaptation episodes."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=10.0))
    """The meta-update's Adam (see :class:`~jaxflow.config.OptimizerConfig`): learning rate beta
    1e-3, the meta-gradient clipped to global norm 10. In device mode ``iterations_per_call``
    counts meta-iterations (one result per call)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        ids = envs.list_task_distributions()  # gymnax's import: only where MAML is configured
        require(self.env in ids, f"{name}.env must be a task distribution, one of {ids}, got {self.env!r}.")
        try:
            envs.make_task_distribution(self.env, **self.env_config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{name}.env_config {self.env_config!r} does not fit {self.env!r}: {e}") from e
        require(self.episodes_per_task >= 2, f"{name}.episodes_per_task must be >= 2, got {self.episodes_per_task}.")
        require(
            self.device.num_seeds == 1 and not self.device.sweep,
            f"{name}: MAML trains one agent; num_seeds and sweep are not supported.",
        )
        if self.mode == "ray":
            require(
                self.rollout.num_workers >= 1 and self.meta_batch_size % self.rollout.num_workers == 0,
                f"{name}: in Ray mode meta_batch_size ({self.meta_batch_size}) must be a multiple of "
                f"num_workers ({self.rollout.num_workers}, at least 1).",
            )
