"""What differs between the JAX environment libraries of :mod:`jaxflow.envs.jax_libraries`: one
:class:`~jaxflow.envs.jax_libraries.LibraryAdapter` each, importing its library on first use.

* craftax: gymnax-like; the ``NoAutoReset`` env's ``reset_env`` / ``step_env`` with craftax's
  ``EnvParams`` (``env_config`` replaces its fields). Its ``done`` joins the time limit
  (``max_timesteps``) and the game's end (death, the boss beaten); the game's end alone, its
  ``is_terminal`` with the time limit lifted, is the termination.
* xminigrid: ``reset(params, key)`` / ``step(params, timestep, action)`` (``env_config``
  replaces ``EnvParams`` fields, e.g. ``max_steps``); a ``LAST`` step with discount 0 is a
  termination, with discount 1 the time limit.
* navix: ``reset(key)`` / ``step(timestep, action)`` (``env_config`` goes to ``navix.make``,
  e.g. ``max_steps``, 100 by default); step type 2 is a termination, 1 the time limit.
* jumanji: dm_env's ``reset(key) -> (state, timestep)`` / ``step(state, action)`` (``env_config``
  goes to ``jumanji.make``); a ``LAST`` step with discount 0 is a termination, else a truncation;
  the time limit is the env's ``time_limit`` where it has one.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp

from jaxflow.envs.jax_libraries import (
    EXTRA,
    Family,
    JaxLibraryConfigError,
    LibraryEnv,
    LibraryParams,
    MissingLibraryError,
)

CRAFTAX_NAMES = ("Craftax-Classic-Pixels-v1", "Craftax-Classic-Symbolic-v1", "Craftax-Pixels-v1", "Craftax-Symbolic-v1")
"""craftax's ids (``craftax.craftax_env.make_craftax_env_from_name``; it has no listing)."""
NO_TIME_LIMIT = jnp.iinfo(jnp.int32).max
"""craftax's ``max_timesteps`` where only the game's own end is asked for."""
LAST = 2
"""dm_env's (jumanji's, xminigrid's) ``StepType.LAST``."""
NAVIX_TRUNCATION, NAVIX_TERMINATION = 1, 2
"""navix's step types (0 is a transition)."""


class Craftax:
    """A craftax environment (``Craftax-Symbolic-v1``, ...; pixels flattened too)."""

    def __init__(self, name: str, **env_config: Any):
        from craftax.craftax_env import make_craftax_env_from_name

        self.env = make_craftax_env_from_name(name, auto_reset=False)
        self.params = self.env.default_params.replace(**env_config)
        self.action_space: gymnasium.Space = gymnasium.spaces.Discrete(int(self.env.num_actions))
        self.max_steps = int(self.params.max_timesteps)

    def reset(self, key: jax.Array) -> tuple[Any, Any]:
        return self.env.reset_env(key, self.params)

    def step(self, key: jax.Array, inner: Any, action: jax.Array) -> tuple[Any, Any, Any, Any, Any]:
        obs, inner, reward, done, _ = self.env.step_env(key, inner, action, self.params)
        terminated = self.env.is_terminal(inner, self.params.replace(max_timesteps=NO_TIME_LIMIT))
        return obs, inner, reward, terminated, done & ~terminated


class XMinigrid:
    """An xminigrid environment (``MiniGrid-Empty-5x5``, ...)."""

    def __init__(self, name: str, **env_config: Any):
        import xminigrid

        self.env, self.params = xminigrid.make(name, **env_config)
        self.action_space: gymnasium.Space = gymnasium.spaces.Discrete(int(self.env.num_actions(self.params)))
        self.max_steps = int(self.params.max_steps or 0)

    def reset(self, key: jax.Array) -> tuple[Any, Any]:
        timestep = self.env.reset(self.params, key)
        return timestep.observation, timestep

    def step(self, key: jax.Array, inner: Any, action: jax.Array) -> tuple[Any, Any, Any, Any, Any]:
        del key  # xminigrid's randomness is in its state
        t = self.env.step(self.params, inner, action)
        last = t.step_type == LAST
        return t.observation, t, t.reward, last & (t.discount == 0), last & (t.discount != 0)


class Navix:
    """A navix environment (``Navix-Empty-5x5-v0``, ...)."""

    def __init__(self, name: str, **env_config: Any):
        import navix

        self.env = navix.make(name, **env_config)
        self.action_space: gymnasium.Space = gymnasium.spaces.Discrete(int(self.env.action_space.maximum) + 1)
        self.max_steps = int(self.env.max_steps)

    def reset(self, key: jax.Array) -> tuple[Any, Any]:
        timestep = self.env.reset(key)
        return timestep.observation, timestep

    def step(self, key: jax.Array, inner: Any, action: jax.Array) -> tuple[Any, Any, Any, Any, Any]:
        del key  # navix's randomness is in its state
        t = self.env.step(inner, action)
        return t.observation, t, t.reward, t.step_type == NAVIX_TERMINATION, t.step_type == NAVIX_TRUNCATION


class Jumanji:
    """A jumanji environment (``Snake-v1``, ...); its ``action_mask`` masks the policy."""

    def __init__(self, name: str, **env_config: Any):
        import jumanji

        self.env = jumanji.make(name, **env_config)
        self.action_space: gymnasium.Space = _jumanji_space(self.env.action_spec)
        self.max_steps = int(getattr(self.env, "time_limit", 0) or 0)

    def reset(self, key: jax.Array) -> tuple[Any, Any]:
        state, timestep = self.env.reset(key)
        return timestep.observation, state

    def step(self, key: jax.Array, inner: Any, action: jax.Array) -> tuple[Any, Any, Any, Any, Any]:
        del key  # jumanji's randomness is in its state
        state, t = self.env.step(inner, action)
        last = t.step_type == LAST
        return t.observation, state, t.reward, last & (t.discount == 0), last & (t.discount != 0)


def _jumanji_space(spec: Any) -> gymnasium.Space:
    """The gymnasium space of a jumanji action spec: ``DiscreteArray`` -> ``Discrete``,
    ``MultiDiscreteArray`` -> ``MultiDiscrete``, a bounded float array -> ``Box``."""
    from jumanji import specs

    if isinstance(spec, specs.DiscreteArray):
        return gymnasium.spaces.Discrete(int(spec.num_values))
    if isinstance(spec, specs.MultiDiscreteArray):
        return gymnasium.spaces.MultiDiscrete(jnp.asarray(spec.num_values).tolist())
    if isinstance(spec, specs.BoundedArray):
        return gymnasium.spaces.Box(float(spec.minimum.min()), float(spec.maximum.max()), spec.shape)
    raise TypeError(f"jumanji action spec {spec} has no gymnasium space here")


def _xminigrid_names() -> tuple[str, ...]:
    import xminigrid

    return tuple(xminigrid.registered_environments())


def _navix_names() -> tuple[str, ...]:
    import navix

    return tuple(navix.registry())


def _jumanji_names() -> tuple[str, ...]:
    import jumanji

    return tuple(jumanji.registered_environments())


FAMILIES = (
    Family("craftax/", "craftax", "Craftax-Classic-Symbolic-v1", lambda: CRAFTAX_NAMES, Craftax),
    Family("jumanji/", "jumanji", "Snake-v1", _jumanji_names, Jumanji),
    Family("navix/", "navix", "Navix-Empty-5x5-v0", _navix_names, Navix),
    Family("xminigrid/", "xminigrid", "MiniGrid-Empty-5x5", _xminigrid_names, XMinigrid),
)
"""Every library, by prefix."""


def family_of(env_id: str) -> Family | None:
    """The library whose prefix ``env_id`` has, or None."""
    return next((f for f in FAMILIES if env_id.startswith(f.prefix)), None)


def installed(family: Family) -> bool:
    """Whether ``family``'s library can be imported here (without importing it)."""
    return importlib.util.find_spec(family.module) is not None


def library_ids(family: Family) -> list[str]:
    """``family``'s ids; :class:`MissingLibraryError` where its library is not installed."""
    if not installed(family):
        raise MissingLibraryError(
            f"{family.prefix}<name> ids need the {family.module} package, which is not installed here: "
            f"pip install 'jaxflow-rl[{EXTRA}]'."
        )
    return sorted(family.prefix + name for name in family.names())


def make_library_env(env_id: str, **env_config: Any) -> tuple[LibraryEnv, LibraryParams]:
    """``(env, params)`` for a library's id; ``env_config`` goes to the library (its ``make``
    or its parameters), and a key it does not take raises :class:`JaxLibraryConfigError`."""
    family = family_of(env_id)
    assert family is not None  # the registry makes only ids with a library's prefix
    try:
        adapter = family.adapter(env_id[len(family.prefix) :], **env_config)
    except TypeError as e:  # a keyword the library's constructor or parameters do not take
        raise JaxLibraryConfigError(f"{env_id}: env_config {sorted(env_config)}: {e}.") from None
    env = LibraryEnv(env_id, adapter)
    return env, env.default_params
