"""The settings every algorithm that learns from replay shares (DQN, Ape-X, SAC, TD3)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxflow.config.common import CommonConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, POSITIVE, SIZE, UNIT, param, require
from jaxflow.config.groups import check_resources


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(CommonConfig):
    """Replay, replay ratio, n-step returns, target network and weight syncs (plus
    :class:`~jaxflow.config.CommonConfig`); an algorithm's config adds its own fields and
    may change these defaults."""

    replay_layout: ClassVar[tuple[str, ...]] = ()
    """Dotted fields, besides the shards and their capacity, that shape what a replay shard
    keeps (R2D2's sequence ring: its lanes and sequence lengths); a resume must keep them."""

    train_batch_size: int = param(64, SIZE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float = param(8.0, POSITIVE)
    """Replay ratio: transitions replayed per transition sampled from the environments."""
    buffer_size: int = param(50_000, SIZE)
    """Transitions kept over all replay shards (the oldest are overwritten)."""
    learning_starts: int = param(1_000, COUNT)
    """Transitions per shard before replay starts."""
    num_replay_shards: int = param(1, SIZE)
    """Replay shard actors the buffer is split over."""
    num_cpus_per_replay_shard: float = param(0.0, NON_NEGATIVE)
    """CPUs Ray reserves for each replay shard (0: shards never keep a rollout worker from
    starting, and go to any node that has their custom resources)."""
    custom_resources_per_replay_shard: dict = param(None, factory=dict)
    """Custom Ray resources each replay shard needs, e.g. ``{"replay": 1}``: shards then run
    only on nodes started with them, placed by ``placement_strategy``."""
    replay_in_driver: bool = param(False)
    """Keep the replay in the driver's process with rollout workers too (as with
    ``num_workers=0``, always): each stored fragment and replayed batch then skips a trip
    through a shard actor. The buffer takes the driver's memory and dies with it (its
    checkpoint still saves and restores it). Needs one shard asking Ray for no resources."""
    n_step: int = param(3, SIZE)
    """Steps summed into each return before bootstrapping (1: one-step targets)."""
    target_update_period: int = param(100, SIZE)
    """SGD steps between two updates of the target network."""
    tau: float = param(1.0, UNIT)
    """How far each target update moves the target toward the parameters, per SGD step
    since the last one: 1 copies them (DQN), a small value averages (Polyak: SAC, TD3)."""
    prioritized_replay: bool = param(True)
    """Sample in proportion to |TD error|^alpha (False: uniformly)."""
    prioritized_replay_alpha: float = param(0.6, NON_NEGATIVE)
    """Priority exponent alpha."""
    prioritized_replay_beta: float = param(0.4, UNIT)
    """Importance-sampling exponent at the start; annealed linearly to 1."""
    beta_annealing_steps: int = param(20_000, SIZE)
    """SGD steps over which beta reaches 1."""
    prioritized_replay_eps: float = param(1e-6, POSITIVE)
    """Added to |TD error| so every transition stays reachable."""
    frame_stack: int = param(1, SIZE)
    """Frames stacked along each observation's first axis (4 for Atari); replay stores single frames."""
    max_weight_sync_delay: int = param(256, SIZE)
    """Env steps a worker samples between two fetches of the learner's weights."""
    min_env_steps_per_iteration: int = param(2_000, COUNT)
    """Env steps sampled per reported training iteration."""

    @property
    def replay_shard_capacity(self) -> int:
        """Transitions each replay shard holds: ``buffer_size`` split evenly over the shards, rounded up."""
        return -(-self.buffer_size // self.num_replay_shards)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_resources(
            f"{type(self).__name__}.custom_resources_per_replay_shard", self.custom_resources_per_replay_shard
        )
        require(
            not self.replay_in_driver
            or (
                self.num_replay_shards == 1
                and self.num_cpus_per_replay_shard == 0
                and not self.custom_resources_per_replay_shard
            ),
            "replay_in_driver=True keeps one replay in the driver's process: it needs num_replay_shards=1 "
            f"(got {self.num_replay_shards}), num_cpus_per_replay_shard=0 (got {self.num_cpus_per_replay_shard}) "
            f"and no custom_resources_per_replay_shard (got {self.custom_resources_per_replay_shard}).",
        )
        require(
            self.n_step < self.rollout.rollout_fragment_length or self.n_step == 1,
            f"n_step ({self.n_step}) must be smaller than rollout_fragment_length "
            f"({self.rollout.rollout_fragment_length}).",
        )
        require(
            self.buffer_size >= self.num_replay_shards * max(self.learning_starts, self.train_batch_size),
            f"buffer_size ({self.buffer_size}) must hold learning_starts ({self.learning_starts}) transitions per shard.",
        )
