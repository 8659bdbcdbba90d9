"""Greedy evaluation of a device-mode run on the device: one compiled call plays every
episode at once (``vmap`` over episodes, ``lax.while_loop`` until the last one ends)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.ondevice.rollout import observed, step_envs
from jaxflow.policies.policy import Policy
from jaxflow.rollout.evaluation import evaluation_seed, summarize_returns
from jaxflow.rollout.normalize import Normalizer

Array = jax.Array


class Episodes(NamedTuple):
    """Every evaluation episode between two steps: ``[E, ...]`` env states and observations,
    returns and lengths so far, and which have ended (they step on, counting nothing)."""

    env_state: Any
    obs: Array
    returns: Array
    lengths: Array
    ended: Array
    key: Array
    policy_state: Any = None
    """A recurrent policy's state (None: feed-forward), never reset: only first episodes count."""


def greedy_episodes(
    env: Any, env_params: Any, policy: Policy, clip: float, params: Any, norm: Normalizer | None, key: Array, n: int
) -> tuple[Array, Array]:
    """The returns and lengths ``[n]`` of ``n`` episodes of the greedy policy, one per env copy.

    Every episode ends by the env's own time limit, so the loop ends; each copy's first
    episode counts, later ones (gymnax resets an ended env) are not counted."""
    k_reset, key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), env_params)
    zeros = jnp.zeros((n,), jnp.float32)

    def play(e: Episodes) -> Episodes:
        key, k_step = jax.random.split(e.key)
        x = observed(norm, e.obs, clip)
        if policy.recurrent:
            state, inputs, _ = policy.step(params, e.policy_state, x, jnp.zeros((n,), bool))
            greedy = policy.distribution.mode(inputs)
        else:
            state, greedy = None, policy.greedy(params, x)
        actions = policy.distribution.to_env(greedy)
        obs, env_state, reward, terminated, truncated, _ = step_envs(
            env, env_params, jax.random.split(k_step, n), e.env_state, actions
        )
        live = ~e.ended
        return Episodes(
            env_state,
            obs,
            e.returns + jnp.where(live, reward, 0.0),
            e.lengths + live,
            e.ended | terminated | truncated,
            key,
            state,
        )

    start = Episodes(
        env_state, obs, zeros, jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool), key, policy.initial_state(n)
    )
    end = jax.lax.while_loop(lambda e: ~jnp.all(e.ended), play, start)
    return end.returns, end.lengths


class DeviceEvaluator:
    """:func:`greedy_episodes` for one run's env and policy, compiled once per number of
    episodes (``traces`` counts the compilations).

    Example:
        >>> evaluator = DeviceEvaluator(env, env_params, policy, config)  # doctest: +SKIP
        >>> evaluator(params, None, episodes=10, seed=None)["return_mean"]  # doctest: +SKIP
    """

    def __init__(self, env: Any, env_params: Any, policy: Policy, config: Any):
        self.config, self.traces = config, 0

        def play(params: Any, norm: Normalizer | None, key: Array, n: int) -> tuple[Array, Array]:
            self.traces += 1  # runs when JAX traces (compiles) the call, not when it runs
            return greedy_episodes(env, env_params, policy, config.rollout.normalize_clip, params, norm, key, n)

        self._play = jax.jit(play, static_argnums=3)

    def __call__(self, params: Any, norm: Normalizer | None, episodes: int, seed: int | None) -> dict[str, Any]:
        key = jax.random.PRNGKey(evaluation_seed(self.config, seed))
        returns, lengths = jax.device_get(self._play(params, norm, key, episodes))
        return summarize_returns(np.asarray(returns).tolist(), lengths=np.asarray(lengths).tolist())
