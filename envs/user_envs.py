"""Environments registered in this process: yours (``register``, ``register_factory``,
``register_jax``, ``register_multiagent``) and jaxflow's own small ones, with the entry and
context types every id resolves to. :mod:`jaxflow.envs.registry` looks ids up here before
gymnasium's, gymnax's, Brax's and the JAX libraries' registries; a run ships an entry made
here to its Ray workers (``custom_entry``, ``adopt``), whose processes never ran the registration.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import gymnasium

if TYPE_CHECKING:
    from pettingzoo import ParallelEnv


class EnvContext(NamedTuple):
    """Where an environment instance lives; passed to factories so a run can give
    each copy its own seed and so test environments can misbehave in one place only."""

    worker_index: int = 0
    vector_index: int = 0
    incarnation: int = 0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    id: str
    kind: Literal["gymnasium", "gymnax", "brax", "jaxlib", "multiagent"]
    factory: Callable[..., Any]
    description: str = ""


REGISTERED: dict[str, EnvEntry] = {}
"""Single-agent ids registered in this process (gymnasium and JAX kinds)."""
REGISTERED_MULTIAGENT: dict[str, EnvEntry] = {}
"""Multi-agent ids registered in this process."""


def register(env_id: str, factory: Callable[..., gymnasium.Env], description: str = "") -> None:
    """Registers a CPU environment: ``factory(context: EnvContext, **kwargs) -> gymnasium.Env``."""
    REGISTERED[env_id] = EnvEntry(env_id, "gymnasium", factory, description)


USER_PREFIX = "user/"
"""Where :func:`register_factory` puts an environment passed as a factory."""


@dataclasses.dataclass(frozen=True)
class PlainFactory:
    """A gymnasium-style ``factory(**env_config)`` behind the registry's ``(context, **env_config)``
    convention (the context is not passed: the worker seeds the env through ``reset``)."""

    plain: Callable[..., gymnasium.Env]

    def __call__(self, context: EnvContext, **kwargs: Any) -> gymnasium.Env:
        del context
        return self.plain(**kwargs)


def register_factory(factory: Callable[..., gymnasium.Env], description: str = "") -> str:
    """Registers ``factory(**env_config) -> gymnasium.Env`` (a ``gymnasium.Env`` class, or a
    function returning one, e.g. written in a notebook) as ``user/<its name>`` and returns that
    id: what ``Algorithm.build(..., env=factory)`` trains. Ray workers get the factory with the
    run, pickled by value where it was written in ``__main__`` or a notebook. A factory of the
    same name replaces the one registered before, as re-running a notebook's cell redefines
    a class; runs already started keep the one they were built with.

    >>> import gymnasium
    >>> class Corridor(gymnasium.Env): ...
    >>> register_factory(Corridor)
    'user/Corridor'
    """
    name = getattr(factory, "__qualname__", type(factory).__name__)
    env_id = USER_PREFIX + name.replace("<locals>.", "").replace("<lambda>", "lambda")
    REGISTERED[env_id] = EnvEntry(env_id, "gymnasium", PlainFactory(factory), description)
    return env_id


def register_jax(env_id: str, factory: Callable[..., tuple[Any, Any]], description: str = "") -> None:
    """Registers an environment written in JAX to gymnax's interface (``reset_env``/``step_env``
    over ``EnvParams``, as ``gymnax.environments.environment.Environment`` subclasses have):
    ``factory(**env_config) -> (env, env_params)``. It trains in device mode as gymnax's own
    ids do (and on Ray workers through the same CPU wrapper)."""
    REGISTERED[env_id] = EnvEntry(env_id, "gymnax", functools.partial(_make_user_jax, factory), description)


def _make_user_jax(factory: Callable[..., tuple[Any, Any]], env_id: str, **kwargs: Any) -> tuple[Any, Any]:
    del env_id  # the registry passes it to every JAX factory; the user's knows its env
    return factory(**kwargs)


def register_multiagent(env_id: str, factory: Callable[..., ParallelEnv], description: str = "") -> None:
    """Registers a multi-agent environment: ``factory(context: EnvContext, **kwargs) -> pettingzoo.ParallelEnv``."""
    REGISTERED_MULTIAGENT[env_id] = EnvEntry(env_id, "multiagent", factory, description)


def custom_entry(env_id: str) -> EnvEntry | None:
    """The entry of an id added with :func:`register` or :func:`register_multiagent` in this
    process (None for gymnasium's and gymnax's own ids). A run sends it to its Ray workers,
    whose processes have not run the registration."""
    return REGISTERED.get(env_id) or REGISTERED_MULTIAGENT.get(env_id)


def adopt(e: EnvEntry) -> None:
    """Registers an entry made in another process (see :func:`custom_entry`), unless this
    process already knows the id."""
    table = REGISTERED_MULTIAGENT if e.kind == "multiagent" else REGISTERED
    table.setdefault(e.id, e)
