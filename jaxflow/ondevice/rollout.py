"""Rollouts of JAX environments on the device: ``vmap`` over environments, ``lax.scan`` over time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxflow.policies.policy import Policy

Array = jax.Array


class EnvCarry(NamedTuple):
    """The environments between two steps: ``[B, ...]`` states, observations, running episodes."""

    env_state: Any
    obs: Array
    episode_return: Array
    episode_length: Array


def step_envs(
    env: Any, env_params: Any, keys: Array, env_state: Any, actions: Array
) -> tuple[Array, Any, Array, Array, Array, Array]:
    """One step of B gymnax environments with gymnax's automatic reset.

    Returns ``(obs, env_state, reward, terminated, truncated, final_obs)``: the next
    observation is a fresh episode's where one ended, ``final_obs`` the ended episode's last
    one. An episode that terminates on its time limit counts as terminated (no bootstrap).
    """
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys, env_state, actions, env_params
    )
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.asarray(truncated, bool) & ~terminated
    return obs, env_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info["final_observation"]


def rollout(
    env: Any,
    env_params: Any,
    policy: Policy,
    act: Callable[..., Any] | None,
    config: Any,
    params: Any,
    carry: EnvCarry,
    key: Array,
    env_steps: Array,
    num_steps: int,
) -> tuple[EnvCarry, dict[str, Array], tuple[Array, Array]]:
    """``num_steps`` steps of every environment with ``policy`` at ``params``: its
    distribution samples the actions, unless ``act(key, dist_inputs, env_steps, config) ->
    (actions, logp)`` explores in its place (DQN's epsilon-greedy).

    The fragment has the fields and conventions of ``RolloutWorker.sample`` (time-major
    ``[T, B]``; a truncated episode's last reward has ``gamma * V(final_obs)`` added and its
    discount is 0), so an algorithm's ``postprocess`` takes it unchanged. Also returns the
    returns and lengths of the episodes that ended, ``[T, B]``, NaN and 0 elsewhere.
    """
    num_envs = carry.obs.shape[0]
    # An episode lasts at most max_steps_in_episode steps, so in a fragment no longer than that an
    # environment truncates at most once: remember where, and bootstrap them all with one forward
    # pass after the scan. (A per-step lax.cond would run the pass on every step once vmapped.)
    once = num_steps <= int(env_params.max_steps_in_episode)
    apply_fn = policy.apply

    def step(inner: tuple[EnvCarry, Any, Any], xs: tuple[Array, Array]):
        c, truncated_obs, truncated_at = inner
        t, key = xs
        k_act, k_env = jax.random.split(key)
        inputs, values = apply_fn(params, c.obs)
        if act is None:
            actions, logp = policy.distribution.sample(k_act, inputs)
        else:
            actions, logp = act(k_act, inputs, env_steps + t * num_envs, config)
        obs, env_state, reward, terminated, truncated, final_obs = step_envs(
            env, env_params, jax.random.split(k_env, num_envs), c.env_state, actions
        )
        if once:
            rewards = reward
            truncated_obs = jnp.where(truncated.reshape((-1,) + (1,) * (obs.ndim - 1)), final_obs, truncated_obs)
            truncated_at = jnp.where(truncated, t, truncated_at)
        else:
            rewards = reward + jax.lax.cond(
                truncated.any(),
                lambda: jnp.where(truncated, config.gamma * apply_fn(params, final_obs)[1], 0.0),
                lambda: jnp.zeros_like(reward),
            )
        done = terminated | truncated
        episode_return, episode_length = c.episode_return + reward, c.episode_length + 1
        out = dict(
            obs=c.obs,
            actions=actions,
            logp=logp,
            dist_inputs=inputs,
            values=values,
            rewards=rewards,
            discounts=jnp.where(done, 0.0, config.gamma).astype(jnp.float32),
        )
        ended = (jnp.where(done, episode_return, jnp.nan), jnp.where(done, episode_length, 0))
        c = EnvCarry(env_state, obs, jnp.where(done, 0.0, episode_return), jnp.where(done, 0, episode_length))
        return (c, truncated_obs, truncated_at), (out, ended)

    inner: tuple[EnvCarry, Any, Any] = (
        (carry, jnp.zeros_like(carry.obs), jnp.full((num_envs,), -1, jnp.int32)) if once else (carry, None, None)
    )
    (carry, truncated_obs, truncated_at), (traj, ended) = jax.lax.scan(
        step, inner, (jnp.arange(num_steps), jax.random.split(key, num_steps))
    )
    if once:
        bootstrap = jnp.where(truncated_at >= 0, config.gamma * apply_fn(params, truncated_obs)[1], 0.0)
        traj["rewards"] = traj["rewards"].at[jnp.maximum(truncated_at, 0), jnp.arange(num_envs)].add(bootstrap)
    traj["bootstrap_value"] = apply_fn(params, carry.obs)[1]
    traj["last_obs"] = carry.obs
    return carry, traj, ended
