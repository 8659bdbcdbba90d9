"""Environments registered in this process: yours (``register``, ``register_factory``,
``register_jax``, ``register_multiagent``) and jaxflow's own small ones, with the entry and
context types every id resolves to. :mod:`jaxflow.envs.registry` looks ids up here before
gymnasium's, gymnax's, Brax's and the JAX libraries' registries; a run ships an entry made
here to its Ray workers (``custom_entry``, ``adopt``), whose processes never ran the registration.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
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


CONTEXT_PARAMETER = "context"
"""A factory whose first parameter has this name is also given the copy's :class:`EnvContext`."""


def register(env_id: str, factory: Callable[..., gymnasium.Env], description: str = "") -> None:
    """Registers a CPU environment as ``env_id``: a ``gymnasium.Env`` class, or a function
    returning one, called with the run's ``env_config`` as keyword arguments. A factory whose
    first parameter is named ``context`` is also given the copy's :class:`EnvContext` first
    (worker and vector index, incarnation, seed: how an env can behave differently in one copy).
    Ray workers get the entry with the run.

    >>> import gymnasium
    >>> class Corridor(gymnasium.Env):
    ...     def __init__(self, length: int = 5): ...
    >>> register("me/Corridor-v0", Corridor)
    >>> custom_entry("me/Corridor-v0").factory(EnvContext(), length=3).__class__.__name__
    'Corridor'
    """
    if not callable(factory):
        raise TypeError(f"envs.register({env_id!r}, ...) takes a gymnasium.Env class or a function, got {factory!r}.")
    made = factory if _takes_context(factory) else PlainFactory(factory)
    REGISTERED[env_id] = EnvEntry(env_id, "gymnasium", made, description)


def _takes_context(factory: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: a plain factory
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return bool(parameters) and parameters[0].name == CONTEXT_PARAMETER and parameters[0].kind in positional


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


GYMNASIUM_IDS_AT_IMPORT = frozenset(gymnasium.registry)
"""gymnasium's ids when jaxflow's registry was imported. One added later (a script's or a
notebook's ``gymnasium.register``) exists in the driver's process only."""


@dataclasses.dataclass(frozen=True)
class SpecFactory:
    """A gymnasium ``EnvSpec`` registered in the driver, made where that registration never ran
    (a Ray worker) with ``gymnasium.make(spec)``; an entry point defined in ``__main__`` or a
    notebook travels by value."""

    spec: gymnasium.envs.registration.EnvSpec

    def __call__(self, context: EnvContext, **kwargs: Any) -> gymnasium.Env:
        del context  # seeded by reset
        return gymnasium.make(self.spec, **kwargs)


def custom_entry(env_id: str) -> EnvEntry | None:
    """The entry of an id registered in this process that a fresh process would not know: one
    added with :func:`register` or :func:`register_multiagent`, or a gymnasium id registered
    after jaxflow was imported or to an entry point in ``__main__`` (None for jaxflow's,
    gymnasium's and gymnax's own ids). A run sends it to its Ray workers."""
    return REGISTERED.get(env_id) or REGISTERED_MULTIAGENT.get(env_id) or _driver_gymnasium_entry(env_id)


def _driver_gymnasium_entry(env_id: str) -> EnvEntry | None:
    spec = gymnasium.registry.get(env_id)
    if spec is None:
        return None
    entry_point = spec.entry_point
    importable = isinstance(entry_point, str) and not entry_point.startswith("__main__:")
    if env_id in GYMNASIUM_IDS_AT_IMPORT and importable:
        return None
    return EnvEntry(env_id, "gymnasium", SpecFactory(spec), "registered with gymnasium in the driver")


def adopt(e: EnvEntry) -> None:
    """Registers an entry made in another process (see :func:`custom_entry`), unless this
    process already knows the id."""
    table = REGISTERED_MULTIAGENT if e.kind == "multiagent" else REGISTERED
    table.setdefault(e.id, e)
