"""R2D2 in device mode: the recurrent Q-policy, Ape-X's epsilons over the environments, the
fragment as the sequence replay stores it, and the replay settings."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.algorithms.apex import actor_rate
from jaxflow.algorithms.r2d2.config import R2D2Config
from jaxflow.algorithms.r2d2.core import rescaled_q_outputs
from jaxflow.algorithms.r2d2.replay import sequence_buffer
from jaxflow.envs.masking import MaskedBox
from jaxflow.networks.recurrent import LSTMQNetwork
from jaxflow.ondevice.spec import DeviceReplay, num_device_envs
from jaxflow.policies import Greedy, Policy
from jaxflow.policies.sequences import SEQUENCE_FIELDS

Array = jax.Array

STORED_FIELDS = ("obs", "actions", "rewards", "discounts", *SEQUENCE_FIELDS)
"""What the sequence replay keeps of a fragment."""


def r2d2_policy(config: R2D2Config, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """The recurrent, dueling Q-network (:class:`~jaxflow.networks.recurrent.LSTMQNetwork`)
    read greedily; its value is ``h^-1(max_a h(Q))``, in return units."""
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise TypeError(f"R2D2's Q-network needs a Discrete action space (one value per action), got {action_space}")
    obs_shape = tuple(obs_space.shape or ())
    network = LSTMQNetwork(
        int(action_space.n), tuple(config.hidden_sizes), config.lstm_units, max(1, len(obs_shape)), config.dueling
    )
    outputs = functools.partial(rescaled_q_outputs, eps=config.value_rescaling_eps)
    masked = isinstance(obs_space, MaskedBox)
    return Policy(network, Greedy(int(action_space.n)), obs_shape, outputs, action_mask=masked, recurrent=True)


def env_epsilons(config: R2D2Config, num_envs: int) -> np.ndarray:
    """Ape-X's fixed exploration rates, ``0.4^(1 + 7 i / (N - 1))`` for env ``i`` of ``N``.

    Example:
        >>> [round(float(e), 4) for e in env_epsilons(R2D2Config(), 3)]
        [0.4, 0.0162, 0.0007]
    """
    base, alpha = config.worker_epsilon_base, config.worker_epsilon_alpha
    return np.array([actor_rate(base, alpha, i, num_envs) for i in range(num_envs)], np.float32)


def explore_on_device(key: Array, q: Array, env_steps: Array, config: R2D2Config) -> tuple[Array, Array]:
    """Each env's epsilon-greedy action with its own fixed epsilon (:func:`env_epsilons`)."""
    del env_steps
    k_explore, k_action = jax.random.split(key)
    explore = jax.random.uniform(k_explore, q.shape[:1]) < env_epsilons(config, q.shape[0])
    random_actions = jax.random.randint(k_action, q.shape[:1], 0, q.shape[-1])
    return jnp.where(explore, random_actions, q.argmax(axis=-1)).astype(jnp.int32), jnp.zeros(q.shape[:1], jnp.float32)


def fragment(traj: Mapping[str, Array], config: R2D2Config) -> dict[str, Array]:
    """The fragment ``[P, B]`` as the sequence replay stores it, with its start state."""
    del config
    return {k: traj[k] for k in STORED_FIELDS}


def sgd_steps_per_fragment(config: R2D2Config, num_envs: int) -> int:
    """SGD steps after each fragment, so that ``samples_per_insert`` trained steps per env step hold on average."""
    inserted = num_envs * config.sequence_period
    return max(1, round(inserted * config.samples_per_insert / (config.train_batch_size * config.trace_length)))


def replay_on_device(config: R2D2Config) -> DeviceReplay:
    """The sequence replay and its ratio, priorities (importance exponent fixed, as in the
    paper) and target period."""
    num_envs = num_device_envs(config)
    beta = config.prioritized_replay_beta if config.prioritized_replay else 0.0
    return DeviceReplay(
        capacity=config.buffer_size,
        batch_size=config.train_batch_size,
        sgd_steps=sgd_steps_per_fragment(config, num_envs),
        alpha=config.prioritized_replay_alpha if config.prioritized_replay else 0.0,
        beta=lambda step: jnp.float32(beta),
        priority_eps=config.prioritized_replay_eps,
        target_update_period=config.target_update_period,
        learning_starts=max(1, config.learning_starts),
        tau=config.tau,
        buffer=sequence_buffer(config.burn_in, config.trace_length, config.sequence_period),
    )
