"""What an algorithm registers to train on the device, and its defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxflow.replay import on_device
from jaxflow.rollout.batch import flatten_time_major

Array = jax.Array


def flat_batch(traj: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """The learner's batch of an on-policy fragment: every ``[T, B, ...]`` field as ``[T * B, ...]``."""
    del config
    return flatten_time_major(dict(traj))


def num_device_envs(config: Any) -> int:
    """The environments device mode steps together: ``device.num_envs``, else the batch Ray
    mode samples per round (``num_workers x num_envs_per_worker``). A fragment of device mode
    is ``num_device_envs x rollout_fragment_length`` steps, and a replay algorithm's SGD steps
    per fragment count those, not one Ray worker's."""
    return config.device.num_envs or max(1, config.rollout.num_workers) * config.rollout.num_envs_per_worker


class ReplayBuffer(NamedTuple):
    """An on-device replay buffer as pure functions over its state: ``init(batch, capacity)``
    (``batch``: the shapes of one prepared batch, as ``DeviceSpec.prepare`` makes it),
    ``add(state, batch, alpha)``, ``sample(state, key, batch_size, beta) -> (items, slots,
    weights)`` and ``update_priorities(state, slots, priorities, alpha)``; its state has a
    ``size``, the items it can sample."""

    init: Callable[[Mapping[str, Any], int], Any]
    add: Callable[[Any, Mapping[str, Array], Any], Any]
    sample: Callable[[Any, Array, int, Any], tuple[dict[str, Array], Array, Array]]
    update_priorities: Callable[[Any, Array, Array, Any], Any]


PRIORITIES = "priorities"
"""The field of a prepared batch of transitions that holds their initial priorities."""


def _init_transitions(batch: Mapping[str, Any], capacity: int) -> on_device.DeviceReplayState:
    example = {k: jnp.zeros(v.shape[1:], v.dtype) for k, v in batch.items() if k != PRIORITIES}
    return on_device.init(example, capacity)


def _add_transitions(state: on_device.DeviceReplayState, batch: Mapping[str, Array], alpha: Any) -> Any:
    items = dict(batch)
    return on_device.add(state, items, items.pop(PRIORITIES), alpha)


TRANSITIONS = ReplayBuffer(_init_transitions, _add_transitions, on_device.sample, on_device.update_priorities)
"""Flat transitions ``[N, ...]`` with their initial ``priorities`` (:mod:`jaxflow.replay.on_device`): DQN's."""


@dataclasses.dataclass(frozen=True)
class DeviceReplay:
    """How a replay algorithm trains on the device, made from its (possibly swept) config:
    after each rollout the fragment's transitions enter an on-device prioritized buffer
    (see :mod:`jaxflow.replay.on_device`; or ``buffer``'s), then ``sgd_steps`` replayed batches are trained on."""

    capacity: int
    batch_size: int
    sgd_steps: int
    alpha: Any
    beta: Callable[[Array], Array]
    """Importance-sampling exponent as a function of the SGD step."""
    priority_eps: Any
    target_update_period: int
    """SGD steps between two updates of the target network."""
    learning_starts: int
    """Transitions in the buffer before training starts."""
    tau: float = 1.0
    """Target update per SGD step (1: copies every ``target_update_period`` steps; smaller:
    Polyak averaging, see :func:`~jaxflow.learn.sgd.target_fraction`)."""
    buffer: ReplayBuffer = TRANSITIONS
    """The buffer's functions (R2D2: sequences, :mod:`jaxflow.algorithms.r2d2.replay`)."""


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """What an algorithm registers to train on the device (its network, ``postprocess`` and
    ``loss`` come from its :class:`~jaxflow.api.spec.AlgorithmSpec`).

    ``act(key, dist_inputs, env_steps, config) -> (actions, logp)`` picks actions in place of
    the policy's distribution (None: sample the distribution; DQN: epsilon-greedy);
    ``prepare(traj, config) -> batch`` makes the loss's batch from a postprocessed fragment
    (default: flat ``[T * B]``); ``replay(config) -> DeviceReplay`` trains from an on-device
    replay buffer instead of on the fresh batch (``prepare`` then returns transitions with a
    ``priorities`` field).
    """

    act: Callable[..., tuple[Array, Array]] | None = None
    prepare: Callable[..., dict[str, Array]] = flat_batch
    replay: Callable[[Any], DeviceReplay] | None = None
