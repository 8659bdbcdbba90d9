"""How DQN explores: epsilon-greedy on the Q-values, on the workers' hosts and on the device."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxflow.algorithms.dqn.config import DQNConfig
from jaxflow.policies import legal_inputs

Array = jax.Array


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Exploration rate as a function of env steps (all workers): linear over ``epsilon_timesteps``."""
    return optax.linear_schedule(config.epsilon_initial, config.epsilon_final, config.epsilon_timesteps)


def epsilon(config: DQNConfig, worker_index: int, env_steps: int) -> float:
    """The rate for a Ray worker, whose env steps of all workers are estimated as its own
    times the number of workers (they sample at about the same rate): the line of
    :func:`epsilon_schedule`, in numpy, since a worker asks on every step (optax's schedule,
    run eagerly, cost about 160 us a step, most of a CartPole worker's step).

    Example:
        >>> from jaxflow.config import make_config
        >>> config = make_config(DQNConfig, env="CartPole-v1", epsilon_final=0.1, epsilon_timesteps=1000)
        >>> [round(epsilon(config, 0, steps), 2) for steps in (0, 500, 2000)]
        [1.0, 0.55, 0.1]
    """
    steps = env_steps * max(1, config.rollout.num_workers)
    return float(np.interp(steps, (0, config.epsilon_timesteps), (config.epsilon_initial, config.epsilon_final)))


def epsilon_greedy(rng: np.random.Generator, q: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The greedy action, or with probability ``eps`` a uniformly random legal one, per row of
    ``q`` (a masked policy's Q-values mark the illegal actions, see ``legal_inputs``)."""
    explore = rng.random(q.shape[0]) < eps
    # The largest of uniform draws over the legal actions is a uniformly random legal action.
    random_legal = np.where(legal_inputs(q), rng.random(q.shape), -1.0).argmax(axis=-1)
    actions = np.where(explore, random_legal, q.argmax(axis=-1))
    return actions.astype(np.int32), np.zeros(q.shape[0], np.float32)


def explore(
    rng: np.random.Generator, q: np.ndarray, config: DQNConfig, worker_index: int, env_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    return epsilon_greedy(rng, q, epsilon(config, worker_index, env_steps))


def explore_on_device(key: Array, q: Array, env_steps: Array, config: DQNConfig) -> tuple[Array, Array]:
    """Device mode's epsilon-greedy, with the exact env step count of the run."""
    k_explore, k_action = jax.random.split(key)
    explore = jax.random.uniform(k_explore, q.shape[:1]) < epsilon_schedule(config)(env_steps)
    random_actions = jax.random.randint(k_action, q.shape[:1], 0, q.shape[-1])
    return jnp.where(explore, random_actions, q.argmax(axis=-1)).astype(jnp.int32), jnp.zeros(q.shape[:1], jnp.float32)
