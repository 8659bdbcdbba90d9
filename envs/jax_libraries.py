"""JAX environment libraries behind gymnax's interface, so device mode trains them:
``craftax/<name>`` (Matthews et al., 2024, "Craftax: A Lightning-Fast Benchmark for
Open-Ended Reinforcement Learning"), ``xminigrid/<name>`` (Nikulin et al., 2024, "XLand-MiniGrid:
Scalable Meta-Reinforcement Learning Environments in JAX"), ``navix/<name>`` (Pignatelli et al.,
2024, "NAVIX: Scaling MiniGrid Environments with JAX") and ``jumanji/<name>`` (Bonnet et al., 2024,
"Jumanji: a Diverse Suite of Scalable Reinforcement Learning Environments in JAX").

Each library is imported only when one of its ids is used (the ``jaxenvs`` extra installs all
four); :mod:`jaxflow.envs.jax_library_adapters` holds what differs between them, a
:class:`LibraryAdapter`. :class:`LibraryEnv` gives every adapter the same conventions:

* observations: every leaf of the library's observation (an array, a named tuple, a dataclass)
  flattened and cast to float32, in the pytree's order, into one vector; an ``action_mask`` leaf
  with one entry per action of a ``Discrete`` action space goes last, as 1.0 (legal) / 0.0, in
  a :class:`~jaxflow.envs.masking.MaskedBox`, so the policy masks illegal actions;
* termination vs truncation: each library's own flag (dm_env's discount 0 vs 1 for jumanji and
  xminigrid, navix's step type, craftax's time limit against its other game-over conditions),
  kept in :class:`LibraryState`; gymnax's ``step`` resets where either ended;
* ``LibraryParams.max_steps_in_episode``: the library's own time limit, an upper bound of an
  episode's length that device mode's rollout relies on (0 where the library has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments.environment import Environment

from jaxflow.envs.masking import ACTION_MASK, MaskedBox

EXTRA = "jaxenvs"
"""The pip extra that installs every library here: ``pip install 'jaxflow-rl[jaxenvs]'``."""


class JaxLibraryConfigError(ValueError):
    """An ``env_config`` a library's environment does not take."""


class MissingLibraryError(ImportError):
    """An id of a library that is not installed here."""


class LibraryAdapter(Protocol):
    """One library environment's calls in jaxflow's terms (:mod:`jaxflow.envs.jax_library_adapters`)."""

    action_space: gymnasium.Space
    max_steps: int
    """The library's time limit (an upper bound of an episode's length), 0 where it has none."""

    def reset(self, key: jax.Array) -> tuple[Any, Any]:
        """``(observation, library state)`` of a new episode."""
        ...

    def step(self, key: jax.Array, inner: Any, action: jax.Array) -> tuple[Any, Any, Any, Any, Any]:
        """``(observation, library state, reward, terminated, truncated)``, never resetting."""
        ...


@dataclasses.dataclass(frozen=True)
class Family:
    """One library: its id prefix, the module it imports as, its ids and its adapter."""

    prefix: str
    module: str
    example: str
    names: Callable[[], tuple[str, ...]]
    adapter: Callable[..., Any]
    """``adapter(name, **env_config)``, a :class:`LibraryAdapter`."""


@struct.dataclass
class LibraryState:
    """The library's own state, the steps taken in the episode and whether the library truncated it."""

    inner: Any
    time: jax.Array
    truncated: jax.Array


@struct.dataclass
class LibraryParams:
    """gymnax's parameters: the time limit device mode's rollout relies on (the rest is the library's)."""

    max_steps_in_episode: int = 0


def _is_mask(path: tuple[Any, ...]) -> bool:
    last = path[-1] if path else None
    return getattr(last, "name", getattr(last, "key", None)) == ACTION_MASK


class LibraryEnv(Environment[LibraryState, LibraryParams]):
    """A library's environment as a gymnax one, observations flat float32 (mask last).

    Example:
        >>> env, params = envs.make("navix/Navix-Empty-5x5-v0")              # doctest: +SKIP
        >>> obs, state = env.reset_env(jax.random.PRNGKey(0), params)        # doctest: +SKIP
        >>> obs.shape, env.action_space(params)                              # doctest: +SKIP
        ((75,), Discrete(7))
    """

    def __init__(self, env_id: str, adapter: LibraryAdapter):
        super().__init__()
        self.env_id, self.adapter = env_id, adapter
        obs, _ = jax.eval_shape(adapter.reset, jax.random.PRNGKey(0))
        leaves = jax.tree_util.tree_flatten_with_path(obs)[0]
        n = adapter.action_space.n if isinstance(adapter.action_space, gymnasium.spaces.Discrete) else None
        masks = [x for p, x in leaves if _is_mask(p) and n is not None and int(np.prod(x.shape)) == n]
        self.masked = bool(masks)
        size = sum(int(np.prod(x.shape)) for _, x in leaves)
        self.num_features = size - (int(n) if self.masked and n is not None else 0)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def default_params(self) -> LibraryParams:
        return LibraryParams(int(self.adapter.max_steps))

    def flatten(self, obs: Any) -> jax.Array:
        """The library's observation as one float32 vector, the action mask (0/1) last."""
        leaves = jax.tree_util.tree_flatten_with_path(obs)[0]
        features = [jnp.ravel(x).astype(jnp.float32) for p, x in leaves if not (self.masked and _is_mask(p))]
        mask = [(jnp.ravel(x) != 0).astype(jnp.float32) for p, x in leaves if self.masked and _is_mask(p)]
        return jnp.concatenate(features + mask)

    def reset_env(self, key: jax.Array, params: LibraryParams) -> tuple[jax.Array, LibraryState]:
        del params
        obs, inner = self.adapter.reset(key)
        return self.flatten(obs), LibraryState(inner, jnp.zeros((), jnp.int32), jnp.zeros((), bool))

    def step_env(
        self, key: jax.Array, state: LibraryState, action: jax.Array, params: LibraryParams
    ) -> tuple[jax.Array, LibraryState, jax.Array, jax.Array, dict[str, Any]]:
        """One library step; ``terminated`` is the library's, its truncation is kept for :meth:`is_truncated`."""
        del params
        obs, inner, reward, terminated, truncated = self.adapter.step(key, state.inner, action)
        terminated = jnp.asarray(terminated, bool)
        truncated = jnp.asarray(truncated, bool) & ~terminated
        new = LibraryState(inner, state.time + 1, truncated)
        return self.flatten(obs), new, jnp.asarray(reward, jnp.float32), terminated, {}

    def is_truncated(self, state: LibraryState, params: LibraryParams) -> jax.Array:
        """The library's own truncation (its time limit), not gymnax's ``time >= max_steps_in_episode``."""
        return state.truncated

    def observation_space(self, params: LibraryParams) -> gymnasium.spaces.Box:
        low = np.full(self.num_features, -np.inf, np.float32)
        high = np.full(self.num_features, np.inf, np.float32)
        if not self.masked:
            return gymnasium.spaces.Box(low, high, low.shape, np.float32)
        n = int(self.adapter.action_space.n)  # type: ignore[attr-defined]  # masked: Discrete
        low, high = np.concatenate([low, np.zeros(n, np.float32)]), np.concatenate([high, np.ones(n, np.float32)])
        return MaskedBox(low, high, gymnasium.spaces.MultiBinary(n))

    def action_space(self, params: LibraryParams) -> gymnasium.Space:
        return self.adapter.action_space
