"""The fields every algorithm's config shares."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, UNIT, _hints, _type_ok, field_names, param, require, validate


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    """Fields every algorithm shares; algorithm configs extend this dataclass."""

    on_policy = False  # not a field: on-policy algorithms set it, and cannot sample ahead

    env: str = "CartPole-v1"
    """Environment id, see `jaxflow list`."""
    env_config: dict = param(None, factory=dict)
    """Keyword arguments for the environment's constructor."""
    num_workers: int = param(2, NON_NEGATIVE)
    """Ray rollout worker actors; 0 samples in the driver process."""
    num_envs_per_worker: int = param(8, POSITIVE)
    """Environments stepped in lockstep by each worker."""
    rollout_fragment_length: int = param(64, POSITIVE)
    """Time steps T per sampled fragment; each fragment is [T, num_envs_per_worker]."""
    seed: int = param(0, NON_NEGATIVE)
    """Seeds parameters, learner RNG, and every environment copy."""
    lr: float = param(3e-4, POSITIVE)
    """Learning rate of the Adam optimizer."""
    gamma: float = param(0.99, UNIT)
    """Discount factor."""
    max_grad_norm: float = param(0.5, POSITIVE)
    """Gradients are clipped to this global norm."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the MLP torso's layers (flat observations)."""
    conv_torso: Literal["nature", "impala"] = "nature"
    """Convolutional torso for image observations ([k, H, W] frame stacks): Nature DQN's CNN or IMPALA's ResNet."""
    vector_env: Literal["python", "ale"] = "python"
    """How a worker steps its environments: one after another in Python, or (ALE/<Game>-v5 ids
    only) in ale-py's C++ vector environment, on ``num_cpus_per_worker`` threads."""
    num_env_groups: int = param(1, POSITIVE)
    """vector_env='ale': a worker's environments split into this many groups stepped in turn
    (2: double buffering), so one group's emulators run while the worker waits for the policy
    on another; must divide num_envs_per_worker. Each group has num_cpus_per_worker emulator
    threads, so whichever group is stepping alone can use all of the worker's CPUs; while
    groups overlap, their threads share those CPUs."""
    sample_async: bool = False
    """Rollout workers step their envs in a background thread one fragment ahead of the
    plan's requests (RLlib's sample_async), so postprocessing, encoding and returning a
    fragment overlap stepping the next; fragments then act with weights up to one fragment
    older. Off-policy and V-trace algorithms only."""
    on_worker_failure: Literal["raise", "ignore", "restart"] = "raise"
    """What a dead rollout worker does to the run: raise, carry on without it, or recreate it."""
    worker_timeout_s: float = param(120.0, POSITIVE)
    """A worker silent for this long is treated as dead (a hang)."""
    num_cpus_per_worker: float = param(1.0, NON_NEGATIVE)
    """CPUs Ray reserves for each rollout worker."""
    num_gpus_per_worker: float = param(0.0, NON_NEGATIVE)
    """GPUs (a fraction: workers share one) Ray reserves for each rollout worker; above 0 the
    worker's policy acts on that GPU instead of the worker's CPU, which then only steps envs
    (with num_workers=0 the driver's worker acts on the driver's default device either way)."""
    metrics_num_episodes: int = param(100, POSITIVE)
    """episode_return_mean averages this many most recent episodes."""
    min_env_steps_per_iteration: int = param(0, NON_NEGATIVE)
    """A training iteration lasts at least this many sampled env steps."""
    mode: Literal["auto", "ray", "device"] = "auto"
    """Ray rollout workers, or rollout and update compiled together on the device (gymnax envs
    only); "auto" picks device mode for a gymnax env when the algorithm has one."""
    num_envs: int | None = param(None, POSITIVE)
    """Device mode: environments stepped together (None: num_workers x num_envs_per_worker,
    the batch Ray mode samples per round); a training batch is num_envs x rollout_fragment_length."""
    iterations_per_call: int = param(10, POSITIVE)
    """Device mode: training iterations (rollout + update) compiled into one call."""
    num_seeds: int = param(1, POSITIVE)
    """Device mode: independent agents with seeds seed, seed + 1, ... trained in one compiled call."""
    sweep: dict = param(None, factory=dict)
    """Device mode: one numeric field and its values, {"lr": [1e-4, 3e-4]}; each value trains
    num_seeds agents, all in one compiled call."""
    member_batching: Literal["auto", "vmap", "map"] = "auto"
    """Device mode, several agents: vmap them (parallel, memory x agents) or run them one after
    another in the compiled call (lax.map: each agent's arithmetic is its single run's, bit for
    bit); auto is vmap on accelerators and map on CPUs."""

    def __post_init__(self) -> None:
        validate(self)
        self._validate_sweep()
        require(all(h > 0 for h in self.hidden_sizes), f"hidden_sizes must be positive, got {self.hidden_sizes}.")
        require(
            self.vector_env != "ale" or self.env.startswith("ALE/"),
            f"vector_env='ale' runs ALE/<Game>-v5 environments only, not {self.env!r}; use vector_env='python'.",
        )
        require(
            self.num_env_groups == 1 or self.vector_env == "ale",
            f"num_env_groups={self.num_env_groups} needs vector_env='ale' (python envs step in the worker's thread).",
        )
        require(
            not (self.sample_async and self.on_policy),
            f"{type(self).__name__}.sample_async=True: this algorithm trains on-policy, and a worker sampling "
            "ahead acts with weights one update old; use it with IMPALA, APPO, DQN or APEX.",
        )
        require(
            self.num_envs_per_worker % self.num_env_groups == 0,
            f"num_env_groups={self.num_env_groups} must divide num_envs_per_worker={self.num_envs_per_worker}.",
        )

    def _validate_sweep(self) -> None:
        if not self.sweep:
            return
        name = type(self).__name__
        require(len(self.sweep) == 1, f"{name}.sweep takes one field, got {sorted(self.sweep)}.")
        field, values = next(iter(self.sweep.items()))
        hints = _hints(type(self))
        require(
            field in hints and field != "sweep",
            f"{name}.sweep: no field {field!r}. Fields: {', '.join(field_names(type(self)))}.",
        )
        require(
            hints[field] is float,
            f"{name}.sweep: {field!r} is not a float field; only numeric fields "
            f"({', '.join(f for f, t in hints.items() if t is float)}) can be swept.",
        )
        require(
            isinstance(values, (list, tuple)) and len(values) > 0 and all(_type_ok(v, float) for v in values),
            f"{name}.sweep[{field!r}] must be a non-empty list of numbers, got {values!r}.",
        )
        for v in values:  # each value must be valid where the field itself is set
            # The swept field is only known at run time, so the keyword arguments are untyped.
            changes: dict[str, Any] = {"sweep": {}, field: float(v)}
            dataclasses.replace(self, **changes)
