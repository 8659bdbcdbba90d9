"""DQN's replay: the shards (or the replay in the driver's process), the importance-sampling exponent, the replay ratio, and the
on-device buffer's transitions and settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxflow import (
    DeviceReplay,
    LocalReplay,
    Placement,
    ReplayShards,
    replay_in_driver,
)
from jaxflow.config import OffPolicyConfig
from jaxflow.ondevice.spec import num_device_envs

Array = jax.Array


def make_replay(
    config: Any, samples_per_insert: float | None = None, error_buffer: float = 0.0
) -> ReplayShards | LocalReplay:
    """The replay shards, splitting ``buffer_size`` evenly; a rate limiter if ``samples_per_insert``
    is set. In the driver's process where nothing else reads or writes it (``replay_in_driver``:
    ``num_workers=0``, one shard asking for no resources): the same shard, called directly."""
    shard = shard_settings(config, samples_per_insert, error_buffer)
    if replay_in_driver(config):
        return LocalReplay(**shard)
    return ReplayShards(config.num_replay_shards, **shard, **shard_actors(config))


def shard_settings(config: Any, samples_per_insert: float | None, error_buffer: float) -> dict[str, Any]:
    """Each shard's buffer and rate limiter (``ReplayShard``'s arguments) from the config's
    replay settings, with the limiter's ratio and slack as the algorithm counts them."""
    return dict(
        capacity=config.replay_shard_capacity,
        alpha=config.prioritized_replay_alpha if config.prioritized_replay else 0.0,
        seed=config.seed,
        samples_per_insert=samples_per_insert,
        min_size_to_sample=max(1, config.learning_starts),
        error_buffer=error_buffer,
    )


def shard_actors(config: Any) -> dict[str, Any]:
    """How a run's shard actors start and come back (``ReplayShards``' ``on_failure``,
    ``placement`` and ``placement_timeout_s``), from its config's rollout and shard settings."""
    return dict(
        on_failure="restart" if config.rollout.on_worker_failure == "restart" else "raise",
        placement=Placement(
            config.num_cpus_per_replay_shard,
            resources=config.custom_resources_per_replay_shard,
            strategy=config.rollout.placement_strategy,
        ),
        placement_timeout_s=config.rollout.placement_timeout_s,
    )


def importance_exponent(config: Any) -> optax.Schedule:
    """beta as a function of SGD steps: ``prioritized_replay_beta`` annealed linearly to 1
    (0 without priorities: uniform replay needs no correction)."""
    return optax.linear_schedule(
        config.prioritized_replay_beta if config.prioritized_replay else 0.0,
        1.0 if config.prioritized_replay else 0.0,
        config.beta_annealing_steps,
    )


def beta_schedule(learner: Any, config: Any) -> Any:
    """Importance-sampling exponent at the learner's current SGD step: :func:`importance_exponent`
    in numpy, since the driver asks before every replayed batch (optax's schedule, run eagerly,
    cost about 0.6 ms a call there: 1-2% of SAC's driver loop on Pendulum).

    Example:
        >>> from types import SimpleNamespace
        >>> from jaxflow.algorithms.dqn import DQNConfig
        >>> from jaxflow.config import make_config
        >>> config = make_config(DQNConfig, env="CartPole-v1", prioritized_replay=True, beta_annealing_steps=100)
        >>> [round(beta_schedule(SimpleNamespace(version=step), config)(), 2) for step in (0, 50, 200)]
        [0.4, 0.7, 1.0]
    """
    schedule = importance_exponent(config)
    ends = (float(schedule(0)), float(schedule(config.beta_annealing_steps)))
    return lambda: float(np.interp(learner.version, (0, config.beta_annealing_steps), ends))


def sgd_steps_per_fragment(config: OffPolicyConfig, num_envs: int | None = None) -> int:
    """SGD steps after each stored fragment of ``num_envs`` environments (default: one Ray
    worker's ``num_envs_per_worker``), so that ``samples_per_insert`` holds on average."""
    fragment = (num_envs or config.rollout.num_envs_per_worker) * config.rollout.rollout_fragment_length
    return max(1, round(fragment * config.samples_per_insert / config.train_batch_size))


def transitions(traj: Mapping[str, Array], config: OffPolicyConfig) -> dict[str, Array]:
    """Device mode: the postprocessed fragment as flat transitions ``[T * B]``, each with its
    bootstrap observation (``next_offsets`` steps later) and its initial priority."""
    del config
    T, B = traj["actions"].shape[:2]
    obs = jnp.concatenate([traj["obs"], traj["last_obs"][None]])
    next_obs = obs[jnp.arange(T)[:, None] + traj["next_offsets"], jnp.arange(B)[None, :]]
    fields = dict(
        obs=traj["obs"],
        next_obs=next_obs,
        actions=traj["actions"],
        rewards=traj["rewards"],
        discounts=traj["discounts"],
        priorities=traj["priorities"],
    )
    return {k: v.reshape((T * B,) + v.shape[2:]) for k, v in fields.items()}


def replay_on_device(config: OffPolicyConfig) -> DeviceReplay:
    """Device mode's replay: the Ray plan's buffer size, replay ratio, priorities and target
    period; the ratio counts every environment device mode steps (``device.num_envs``)."""
    return DeviceReplay(
        capacity=config.buffer_size,
        batch_size=config.train_batch_size,
        sgd_steps=sgd_steps_per_fragment(config, num_device_envs(config)),
        alpha=config.prioritized_replay_alpha if config.prioritized_replay else 0.0,
        beta=importance_exponent(config),
        priority_eps=config.prioritized_replay_eps,
        target_update_period=config.target_update_period,
        learning_starts=config.learning_starts,
        tau=config.tau,
    )
