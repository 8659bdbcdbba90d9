"""The groups of settings an algorithm's config holds: its rollouts, its device mode, its optimizer.

Each group is a frozen dataclass validated on construction, like the config that holds it;
an algorithm with other defaults gives its config's group field a factory of its own, e.g.
``rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(rollout_fragment_length=32))``.
Checks that need fields of more than one group (an ALE vector env needs an ALE env id) are
the holding config's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

from jaxflow.config.constants import WORKER_SEED_STRIDE
from jaxflow.config.fields import (
    MAX_SIZE,
    NON_NEGATIVE,
    POSITIVE,
    SIZE,
    UNIT,
    Check,
    ConfigError,
    param,
    require,
    validate,
)
from jaxflow.config.names import StrictKeywords

PlacementStrategy = Literal["pack", "spread"]

RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
"""Ray's own resources, which a config sets through its num_cpus / num_gpus fields."""


def check_resources(owner: str, resources: Mapping[str, Any]) -> None:
    """Raises :class:`ConfigError` (naming ``owner``, a config field) unless ``resources``
    maps custom Ray resource names to finite amounts above 0.

    Example:
        >>> check_resources("RolloutConfig.custom_resources_per_worker", {"rollout": 1})
    """
    for name, amount in resources.items():
        if not isinstance(name, str) or not name or name in RESERVED_RESOURCES:
            raise ConfigError(
                f"{owner} names custom Ray resources (e.g. {{'rollout': 1}}); {name!r} is not one "
                "(CPUs and GPUs have num_cpus/num_gpus fields of their own)."
            )
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < math.inf:
            raise ConfigError(f"{owner}[{name!r}] must be a number above 0, got {amount!r}.")


@dataclasses.dataclass(frozen=True)
class RolloutConfig(StrictKeywords):
    """How rollout workers sample: how many, how many environments each, and their resources."""

    num_workers: int = param(2, NON_NEGATIVE)
    """Ray rollout worker actors; 0 samples in the driver process."""
    num_envs_per_worker: int = param(8, Check(low=1, high=WORKER_SEED_STRIDE))
    """Environments stepped in lockstep by each worker; more amortise the per-step policy call.
    At most ``WORKER_SEED_STRIDE`` (10,000): worker ``i``'s envs are seeded from
    ``seed + i * WORKER_SEED_STRIDE``, so more would repeat the next worker's seeds (and a
    typo such as 1e9 fails here, before anything starts, not as an out-of-memory worker)."""
    rollout_fragment_length: int = param(64, SIZE)
    """Time steps T per sampled fragment; each fragment is [T, num_envs_per_worker]."""
    vector_env: Literal["auto", "python", "ale", "envpool"] = "auto"
    """How a worker steps its environments: one after another in Python, (ALE/<Game>-v5 ids
    only) in ale-py's C++ vector environment, or (the ids of ``envs.ENVPOOL_IDS`` and the
    ALE/<Game>-v5 games; the ``envpool`` extra) in envpool's, each C++ one on
    ``num_cpus_per_worker`` threads; "auto" is ale-py's for the preprocessed ALE/<Game>-v5
    games it runs and Python for every other env (``rollout.vector_backend``)."""
    num_env_groups: int = param(1, SIZE)
    """vector_env='ale' or 'envpool': a worker's environments split into this many groups stepped in turn
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
    custom_resources_per_worker: dict = param(None, factory=dict)
    """Custom Ray resources each rollout worker needs, e.g. ``{"rollout": 1}``: workers then
    run only on nodes started with them (``ray start --resources='{"rollout": 8}'``), at
    most as many per node as the node has."""
    placement_strategy: PlacementStrategy = "pack"
    """How Ray places the run's actors (rollout workers and replay shards) over the nodes
    that have their resources: "pack" (Ray's default: fill a node, the driver's first,
    before using the next) or "spread" (each new actor on the node with the fewest)."""
    placement_timeout_s: float = param(60.0, POSITIVE)
    """A worker or shard restarted after its node left waits this long for a live node
    with its resources (one may join) before the run stops, naming what it needs."""
    check_finite: bool = True
    """A NaN or infinite observation or reward from an env stops the worker on that step,
    naming the env, the worker and the field (False lets them through)."""
    normalize_observations: bool = False
    """Observations normalized by the running mean and std of all observations the workers
    saw, merged on the driver every iteration, saved in checkpoints and used by evaluation."""
    scale_rewards: bool = False
    """Rewards divided by the running std of each env's discounted return (Engstrom et al., 2020)."""
    normalize_clip: float = param(10.0, POSITIVE)
    """Normalized observations and scaled rewards are clipped to [-normalize_clip, normalize_clip]."""

    def __post_init__(self) -> None:
        validate(self)
        check_resources("RolloutConfig.custom_resources_per_worker", self.custom_resources_per_worker)
        require(
            self.num_env_groups == 1 or self.vector_env != "python",
            f"num_env_groups={self.num_env_groups} needs vector_env='ale' or 'envpool' (python envs step in the worker's thread).",
        )
        require(
            self.num_envs_per_worker % self.num_env_groups == 0,
            f"num_env_groups={self.num_env_groups} must divide num_envs_per_worker={self.num_envs_per_worker}.",
        )
        steps = self.rollout_fragment_length * self.num_envs_per_worker  # the rows of each fragment's arrays
        require(
            steps <= MAX_SIZE,
            f"RolloutConfig.rollout_fragment_length={self.rollout_fragment_length} x num_envs_per_worker="
            f"{self.num_envs_per_worker} is {steps:,} steps a fragment; at most MAX_SIZE ({MAX_SIZE:,}).",
        )


@dataclasses.dataclass(frozen=True)
class DeviceConfig(StrictKeywords):
    """Device mode: rollout and update compiled together, for one agent or many in one call."""

    num_envs: int | None = param(None, SIZE)
    """Environments stepped together (None: num_workers x num_envs_per_worker, the batch Ray
    mode samples per round); a training batch is num_envs x rollout_fragment_length."""
    iterations_per_call: int = param(10, SIZE)
    """Training iterations (rollout + update) compiled into one call."""
    num_seeds: int = param(1, SIZE)
    """Independent agents with seeds seed, seed + 1, ... trained in one compiled call."""
    sweep: dict = param(None, factory=dict)
    """One float field of the config and its values, {"lr": [1e-4, 3e-4]} (a flat or dotted
    name, e.g. "optimizer.lr"); each value trains num_seeds agents, all in one compiled call.
    The holding config checks the field, since it names one of that config's fields."""
    member_batching: Literal["auto", "vmap", "map"] = "auto"
    """Several agents: vmap them (parallel, memory x agents) or run them one after another in
    the compiled call (lax.map: each agent's arithmetic is its single run's, bit for bit);
    auto is vmap on accelerators and map on CPUs."""
    pbt: tuple[str, ...] = ()
    """Population-based training (Jaderberg et al., 2017) of the members: the float fields it
    perturbs, e.g. ("lr", "ent_coef"); empty: off. Every ``pbt_interval`` iterations the bottom
    ``pbt_quantile`` of the members by recent return copy a top member's parameters and optimizer
    state and perturb these fields. The holding config checks the names."""
    pbt_interval: int = param(20, SIZE)
    """Training iterations between PBT steps (taken at the end of the compiled call that reaches
    a multiple of it)."""
    pbt_quantile: float = param(0.25, Check(low=0, high=0.5, low_inclusive=False))
    """The fraction of members (at least one) that copies, and the fraction they copy from."""
    pbt_resample_prob: float = param(0.25, UNIT)
    """The chance that a perturbed field is drawn again from the members' initial values instead
    of multiplied by 0.8 or 1.2."""

    def __post_init__(self) -> None:
        validate(self)


NO_CLIPPING = 1e6
"""A gradient norm no update reaches: a ``max_grad_norm`` this large or larger clips nothing,
and the learner computes no norm for it (SAC's and TD3's papers do not clip gradients)."""


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(StrictKeywords):
    """The learner's optimizer: Adam with its gradients clipped by global norm."""

    lr: float = param(3e-4, POSITIVE)
    """Learning rate of the Adam optimizer."""
    max_grad_norm: float = param(0.5, POSITIVE)
    """Gradients are clipped to this global norm (none at ``NO_CLIPPING`` or above)."""
    on_nonfinite: Literal["raise", "skip"] = "raise"
    """An SGD step whose loss or gradient is NaN or infinite leaves the parameters and the
    optimizer state as they were, then the run stops ("raise") or goes on, the step counted
    in ``learner/nonfinite_step_fraction`` ("skip")."""

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True)
class DistributedReplayConfig(StrictKeywords):
    """Ape-X's shape (Horgan et al., 2018): actors sampling asynchronously, replayed batches
    read ahead from the shards, and a learner thread with queues on both sides."""

    replay_batch_size: int = param(512, SIZE)
    """Transitions per replay request (the paper's 512), split into SGD steps of ``train_batch_size``."""
    replay_num_async: int = param(2, SIZE)
    """Sample requests in flight per shard."""
    rollouts_num_async: int = param(2, SIZE)
    """Sample requests in flight per actor."""
    learner_queue_size: int = param(4, SIZE)
    """Replayed batches waiting for the learner thread (and results waiting for the plan)."""

    def __post_init__(self) -> None:
        validate(self)
