"""Rollouts of JAX environments on the device: ``vmap`` over environments, ``lax.scan`` over time."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxflow.policies.policy import Policy
from jaxflow.policies.sequences import STARTS_FIELD, STATE_FIELD
from jaxflow.rollout.normalize import (
    Normalizer,
    discounted_returns,
    moments_merge,
    moments_of,
    normalize_observations,
    normalizer_init,
    scale_rewards,
)
from jaxflow.rollout.truncation import truncation_bootstrap

Array = jax.Array


NONFINITE_OBSERVATION, NONFINITE_REWARD = 1, 2
"""The bits of :attr:`Ended.nonfinite`: the step's observation (the next one, or the ended
episode's final one) or its reward was NaN or infinite."""


class Ended(NamedTuple):
    """What each step of a rollout tells the host, ``[T, B]``."""

    returns: Array
    """The return of each episode where it ended, NaN elsewhere."""
    lengths: Array
    """The length of each episode where it ended, 0 elsewhere."""
    nonfinite: Array
    """int8: ``NONFINITE_OBSERVATION | NONFINITE_REWARD`` bits where the env's step gave a NaN
    or infinite value (a floating-point observation or the reward), 0 elsewhere."""


def first_nonfinite(nonfinite: Array) -> tuple[Array, Array]:
    """``(t * B + b, bits)`` of the first (in time, then env) step :attr:`Ended.nonfinite`
    flags, or ``(-1, 0)``: two scalars a compiled call hands to the host, which names the step."""
    flat = nonfinite.reshape(-1)
    first = jnp.argmax(flat > 0)
    return jnp.where(flat[first] > 0, first, -1).astype(jnp.int32), flat[first]


def nonfinite_bits(obs: Array, final_obs: Array, reward: Array) -> Array:
    """``[B]`` :attr:`Ended.nonfinite` of one vector step (integer observations are always finite)."""

    def bad(x: Array) -> Array:
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.zeros(x.shape[0], bool)
        return ~jnp.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)

    obs_bits = jnp.where(bad(obs) | bad(final_obs), NONFINITE_OBSERVATION, 0)
    return (obs_bits | jnp.where(bad(reward), NONFINITE_REWARD, 0)).astype(jnp.int8)


class EnvCarry(NamedTuple):
    """The environments between two steps: ``[B, ...]`` states, observations (as the
    environments gave them), running episodes; and where the run normalizes, its statistics
    (replicated, not per env) and each env's discounted return for reward scaling; and for a
    recurrent policy its ``[B, ...]`` state and whether each observation is an episode's first."""

    env_state: Any
    obs: Array
    episode_return: Array
    episode_length: Array
    normalizer: Normalizer | None = None
    discounted: Array | None = None
    policy_state: Any = None
    episode_start: Array | None = None


def initial_carry(env: Any, env_params: Any, policy: Policy, config: Any, num_envs: int, key: Array) -> EnvCarry:
    """``num_envs`` environments reset with ``key``: no episode under way, the normalizer's
    statistics (where the run normalizes) counting their first observations, and for a
    recurrent policy every env starting an episode from the initial state."""
    obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num_envs), env_params)
    zeros = jnp.zeros(num_envs, jnp.float32)
    norm = count_observations(normalizer_init(config, obs.shape[1:], jnp), obs)
    discounted = zeros if norm is not None and norm.ret is not None else None
    carry = EnvCarry(env_state, obs, zeros, jnp.zeros(num_envs, jnp.int32), norm, discounted)
    if policy.recurrent:
        carry = carry._replace(policy_state=policy.initial_state(num_envs), episode_start=jnp.ones(num_envs, bool))
    return carry


def observed(norm: Normalizer | None, obs: Array, clip: float) -> Array:
    """``obs`` as the policy sees it: normalized with the statistics where the run normalizes."""
    return obs if norm is None or norm.obs is None else normalize_observations(norm.obs, obs, clip)


def count_observations(norm: Normalizer | None, obs: Array) -> Normalizer | None:
    """The statistics with the ``[B, ...]`` observations ``obs`` counted in."""
    return norm if norm is None or norm.obs is None else norm._replace(obs=moments_merge(norm.obs, moments_of(obs)))


def step_envs(
    env: Any, env_params: Any, keys: Array, env_state: Any, actions: Array
) -> tuple[Array, Any, Array, Array, Array, Array]:
    """One step of B JAX environments (gymnax's interface: gymnax and brax ids) with gymnax's automatic reset.

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
) -> tuple[EnvCarry, dict[str, Array], Ended]:
    """``num_steps`` steps of every environment with ``policy`` at ``params``: its
    distribution samples the actions, unless ``act(key, dist_inputs, env_steps, config) ->
    (actions, logp)`` explores in its place (DQN's epsilon-greedy).

    The fragment has the fields and conventions of ``RolloutWorker.sample`` (time-major
    ``[T, B]``; time limits bootstrapped by the same
    :func:`~jaxflow.rollout.truncation.truncation_bootstrap`), so an algorithm's
    ``postprocess`` takes it unchanged. Also returns :class:`Ended`: the returns and lengths
    of the episodes that ended, and which steps gave a NaN or infinite value, ``[T, B]``.

    A recurrent policy's state goes along in ``carry``: the fragment holds its
    ``episode_starts [T, B]`` and the ``policy_state`` it started from
    (:mod:`jaxflow.policies.sequences`), and the values it bootstraps from read the state
    the episode reached.
    """
    num_envs = carry.obs.shape[0]
    start_state = carry.policy_state
    # An episode lasts at most max_steps_in_episode steps, so in a fragment no longer than that an
    # environment truncates at most once: remember where, and bootstrap them all with one forward
    # pass after the scan. (A per-step lax.cond would run the pass on every step once vmapped.)
    once = num_steps <= int(env_params.max_steps_in_episode)
    step = functools.partial(_step, env, env_params, policy, act, config, params, env_steps, num_envs, once)
    # With once, the scan remembers each truncated env's final observation, step and state.
    remembered = (jnp.zeros_like(carry.obs), jnp.full((num_envs,), -1, jnp.int32), carry.policy_state)
    inner: tuple[EnvCarry, Any] = (carry, remembered if once else None)
    (carry, truncations), (traj, ended) = jax.lax.scan(
        step, inner, (jnp.arange(num_steps), jax.random.split(key, num_steps))
    )
    if once:
        truncated_obs, truncated_at, truncated_state = truncations
        cut = jnp.arange(num_steps)[:, None] == truncated_at[None, :]  # [T, B]: where each env truncated
        v_final = policy.value_after(params, truncated_state, truncated_obs)
        traj["rewards"], _ = truncation_bootstrap(traj["rewards"], jnp.zeros_like(cut), cut, config.gamma, v_final)
    last_obs = observed(carry.normalizer, carry.obs, config.rollout.normalize_clip)
    if carry.episode_start is not None:  # set where the policy is recurrent
        state = policy.reset_state(carry.policy_state, carry.episode_start)
        traj[STATE_FIELD] = start_state
    else:
        state = None
    traj["bootstrap_value"] = policy.value_after(params, state, last_obs)
    traj["last_obs"] = last_obs
    return carry, traj, ended


def _step(
    env: Any,
    env_params: Any,
    policy: Policy,
    act: Callable[..., Any] | None,
    config: Any,
    params: Any,
    env_steps: Array,
    num_envs: int,
    once: bool,
    inner: tuple[EnvCarry, Any],
    xs: tuple[Array, Array],
) -> tuple[tuple[EnvCarry, Any], tuple[dict[str, Array], Ended]]:
    """One step of :func:`rollout`'s scan; with ``once``, truncations are only remembered."""
    c, truncations = inner
    t, key = xs
    k_act, k_env = jax.random.split(key)
    clip = config.rollout.normalize_clip
    x = observed(c.normalizer, c.obs, clip)
    state, inputs, values = _forward(policy, params, c, x, policy.noise_key(key))
    if act is None:
        actions, logp = policy.distribution.sample(k_act, inputs)
    else:
        actions, logp = act(k_act, inputs, env_steps + t * num_envs, config)
    obs, env_state, reward, terminated, truncated, final_obs = step_envs(
        env, env_params, jax.random.split(k_env, num_envs), c.env_state, policy.distribution.to_env(actions)
    )
    norm = count_observations(c.normalizer, obs)
    final_x = observed(norm, final_obs, clip)
    if once:  # bootstrapped after the scan, from the remembered final observations and states
        v_final = jnp.zeros_like(reward)
        truncations = _remember(truncations, truncated, t, final_x, state)
    else:
        v_final = jax.lax.cond(
            truncated.any(), lambda: policy.value_after(params, state, final_x), lambda: jnp.zeros_like(reward)
        )
    done = terminated | truncated
    norm, scaled, discounted = _scale(norm, c.discounted, reward, done, config.gamma, clip)
    rewards, discounts = truncation_bootstrap(scaled, terminated, truncated, config.gamma, v_final)
    out = dict(
        obs=x,
        actions=actions,
        logp=logp,
        dist_inputs=inputs,
        values=values,
        rewards=rewards,
        discounts=discounts.astype(jnp.float32),
    )
    if policy.recurrent:
        out[STARTS_FIELD] = c.episode_start
    c, (returns, lengths) = _next_carry(c, env_state, obs, reward, done, norm, discounted, state, policy.recurrent)
    return (c, truncations), (out, Ended(returns, lengths, nonfinite_bits(obs, final_obs, reward)))


def _next_carry(
    c: EnvCarry,
    env_state: Any,
    obs: Array,
    reward: Array,
    done: Array,
    norm: Normalizer | None,
    discounted: Array | None,
    state: Any,
    recurrent: bool,
) -> tuple[EnvCarry, tuple[Array, Array]]:
    """The carry after one step, from ``c`` before it, and the returns and lengths of the
    episodes the step ended (NaN and 0 elsewhere); a ``recurrent`` policy's ``state`` goes on
    with whether each observation starts an episode."""
    episode_return, episode_length = c.episode_return + reward, c.episode_length + 1
    ended = (jnp.where(done, episode_return, jnp.nan), jnp.where(done, episode_length, 0))
    carry = EnvCarry(
        env_state,
        obs,
        jnp.where(done, 0.0, episode_return),
        jnp.where(done, 0, episode_length),
        norm,
        discounted,
        state,
        done if recurrent else None,
    )
    return carry, ended


def _forward(policy: Policy, params: Any, c: EnvCarry, x: Array, key: Array | None) -> tuple[Any, Array, Array]:
    """``(next policy state, distribution inputs, values)`` of one step (the state None:
    feed-forward); ``key`` draws a noisy network's noise, fresh every step."""
    if c.episode_start is not None:  # set where the policy is recurrent
        return policy.step(params, c.policy_state, x, c.episode_start, key)
    inputs, values = policy.apply(params, x, key)
    return None, inputs, values


def _remember(truncations: Any, truncated: Array, t: Array, final_x: Array, state: Any) -> Any:
    """The final observation, step and policy state of the envs that truncated at step ``t``."""

    def where(new: Array, old: Array) -> Array:
        return jnp.where(truncated.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)

    obs, at, states = truncations
    return where(final_x, obs), jnp.where(truncated, t, at), jax.tree.map(where, state, states)


def _scale(
    norm: Normalizer | None, discounted: Array | None, reward: Array, done: Array, gamma: float, clip: float
) -> tuple[Normalizer | None, Array, Array | None]:
    """Reward scaling's step: the statistics with the discounted returns counted, the scaled
    rewards, and the discounted returns the next step adds to."""
    if norm is None or norm.ret is None:
        return norm, reward, discounted
    returns, discounted = discounted_returns(discounted, reward, done, gamma)
    ret = moments_merge(norm.ret, moments_of(returns))
    return norm._replace(ret=ret), scale_rewards(ret, reward, clip), discounted
