"""One registry for every environment jaxflow runs: `make("CartPole-v1")`.

Ids come in two kinds:

* ``"gymnasium"`` -- CPU environments following the gymnasium API (every id in
  gymnasium's own registry, e.g. ``"CartPole-v1"``), stepped by rollout workers.
* ``"gymnax"`` -- environments written in JAX, named ``"gymnax/<id>"`` (e.g.
  ``"gymnax/CartPole-v1"``). ``make`` returns ``(env, env_params)`` for them;
  ``make_cpu`` wraps them as a gymnasium env so Ray rollout workers can run them too.
* ``"brax"`` -- Brax's physics environments, named ``"brax/<name>"`` (e.g.
  ``"brax/inverted_pendulum"``), behind gymnax's interface (:mod:`jaxflow.envs.brax_envs`),
  so ``make`` and ``make_cpu`` treat them as gymnax ids; ``env_config`` picks the
  ``backend`` (physics pipeline) and ``episode_length``.
* ``"jaxlib"`` -- the JAX libraries' environments, ``"craftax/<name>"``, ``"xminigrid/<name>"``,
  ``"navix/<name>"`` and ``"jumanji/<name>"``, behind gymnax's interface
  (:mod:`jaxflow.envs.jax_libraries`); each library is imported when one of its ids is used.

POPGym's memory tasks, ``"popgym/<Name>-v0"`` (:mod:`jaxflow.envs.popgym_envs`), are of the first.

A third kind, ``"multiagent"``, holds environments following PettingZoo's Parallel API
(``pettingzoo.ParallelEnv``), created with ``make_multiagent`` and stepped by
``envs.multiagent.MultiAgentVectorEnv``; ``register_multiagent`` adds your own.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium

from jaxflow.envs.flatten import flatten_observations
from jaxflow.envs.integer_actions import discrete_actions
from jaxflow.envs.mujoco_warnings import is_mujoco_env, quiet_model_deprecations
from jaxflow.envs.popgym_envs import POPGYM_GYMNASIUM_PREFIX, POPGYM_PREFIX, popgym_class, popgym_ids
from jaxflow.envs.user_envs import REGISTERED, REGISTERED_MULTIAGENT, EnvContext, EnvEntry, PlainFactory

# Brax's and the JAX libraries' modules (jaxflow.envs.brax_envs, jax_library_adapters) are
# imported where one of their ids is asked for: they import gymnax, and gymnax's own import
# (seaborn, scipy.stats, matplotlib, pandas with it) takes about 1.3 s of CPU, which every Ray
# rollout worker would pay on a gymnasium env.
if TYPE_CHECKING:
    from pettingzoo import ParallelEnv

    from jaxflow.envs.jax_libraries import Family

GYMNAX_PREFIX = "gymnax/"
BRAX_PREFIX = "brax/"
JAX_KINDS = ("gymnax", "brax", "jaxlib")
"""The kinds written in JAX: ``make`` returns ``(env, env_params)`` with gymnax's interface."""


class UnknownEnvError(KeyError):
    """An id that no registry knows; the message lists the closest known ids."""

    def __str__(self) -> str:  # KeyError would quote the message.
        return str(self.args[0])


class EnvKindError(ValueError):
    """A known id passed to the constructor of another kind, e.g. a multi-agent id to ``make``."""


def _gymnax_ids() -> list[str]:
    import gymnax

    return [GYMNAX_PREFIX + name for name in gymnax.registered_envs]


def _brax_ids() -> list[str]:
    from jaxflow.envs.brax_envs import brax_names

    return [BRAX_PREFIX + name for name in brax_names()]


def _library_ids() -> list[str]:
    """The ids of every JAX library installed here (importing them: seconds)."""
    from jaxflow.envs.jax_library_adapters import FAMILIES, installed, library_ids

    return [i for f in FAMILIES if installed(f) for i in library_ids(f)]


def list_envs(kind: str | None = None) -> list[str]:
    """All known ids, sorted; ``kind`` filters to "gymnasium", "gymnax", "brax", "jaxlib" or "multiagent"."""
    ids: list[str] = []
    if kind in (None, "gymnasium"):
        # POPGym's own gymnasium ids (there once popgym is imported) are listed once, as popgym/ ids.
        ids += [i for i in gymnasium.registry if not i.startswith(POPGYM_GYMNASIUM_PREFIX)] + popgym_ids()
        ids += [i for i, e in REGISTERED.items() if e.kind == "gymnasium"]
    if kind in (None, "gymnax"):
        ids += _gymnax_ids() + [i for i, e in REGISTERED.items() if e.kind == "gymnax"]
    if kind in (None, "brax"):
        ids += _brax_ids()
    if kind in (None, "jaxlib"):
        ids += _library_ids()
    if kind in (None, "multiagent"):
        ids += list(REGISTERED_MULTIAGENT)
    return sorted(set(ids))


def entry(env_id: str) -> EnvEntry:
    """The registry entry of ``env_id``; an unknown id raises with suggestions."""
    if env_id in REGISTERED:
        return REGISTERED[env_id]
    if env_id in REGISTERED_MULTIAGENT:
        return REGISTERED_MULTIAGENT[env_id]
    if env_id.startswith(GYMNAX_PREFIX) and env_id in _gymnax_ids():
        return EnvEntry(env_id, "gymnax", _make_gymnax)
    if env_id.startswith(BRAX_PREFIX) and env_id in _brax_ids():
        from jaxflow.envs.brax_envs import make_brax

        return EnvEntry(env_id, "brax", make_brax)
    if env_id in gymnasium.registry:
        return EnvEntry(env_id, "gymnasium", _gymnasium_factory(env_id))
    if env_id.startswith(POPGYM_PREFIX):  # env_config goes to the class, e.g. RepeatPrevious's num_decks and k
        try:
            return EnvEntry(env_id, "gymnasium", PlainFactory(popgym_class(env_id)), "POPGym (needs memory)")
        except (ImportError, LookupError) as e:  # popgym not installed, or not its id
            raise UnknownEnvError(str(e)) from None
    from jaxflow.envs.jax_library_adapters import family_of

    family = family_of(env_id)
    if family is not None:
        return _library_entry(env_id, family)
    # Not the libraries' ids: importing them all would take seconds for a typo.
    known = [i for kind in ("gymnasium", "gymnax", "brax", "multiagent") for i in list_envs(kind)]
    close = difflib.get_close_matches(env_id, known, n=5, cutoff=0.5)
    hint = f" Did you mean one of {close}?" if close else ""
    raise UnknownEnvError(f"Unknown environment {env_id!r}.{hint} Run `jaxflow list` to see every id.")


def _library_entry(env_id: str, family: Family) -> EnvEntry:
    from jaxflow.envs.jax_library_adapters import library_ids, make_library_env

    try:
        ids = library_ids(family)
    except ImportError as e:  # the library is not installed: say which extra installs it
        raise UnknownEnvError(f"Environment {env_id!r}: {e}") from None
    if env_id in ids:
        return EnvEntry(env_id, "jaxlib", make_library_env)
    close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.5)
    raise UnknownEnvError(f"Unknown environment {env_id!r}. Did you mean one of {close or ids[:5]}?")


def make(env_id: str, context: EnvContext | None = None, **kwargs: Any) -> Any:
    """Creates an environment.

    Returns a ``gymnasium.Env`` for CPU ids and ``(env, env_params)`` for gymnax and brax ids.
    A CPU env's observations that are not a ``Box`` come flattened to a float32 vector
    (Discrete one-hot; see :mod:`jaxflow.envs.flatten`), and integer ``Box`` actions are chosen
    as ``Discrete`` ones (:mod:`jaxflow.envs.integer_actions`).
    """
    e = entry(env_id)
    _refuse_multiagent(e)
    if e.kind in JAX_KINDS:
        return e.factory(env_id, **kwargs)
    return flatten_observations(discrete_actions(e.factory(context or EnvContext(), **kwargs)), env_id)


def make_cpu(env_id: str, context: EnvContext | None = None, **kwargs: Any) -> gymnasium.Env:
    """A gymnasium env for any id: gymnax and brax envs are wrapped to step on the CPU, and a gymnasium
    env's observations that are not a ``Box`` are flattened to a float32 vector (Discrete
    one-hot; see :mod:`jaxflow.envs.flatten`), its integer ``Box`` actions chosen as ``Discrete``
    ones (:mod:`jaxflow.envs.integer_actions`)."""
    e = entry(env_id)
    _refuse_multiagent(e)
    if e.kind in JAX_KINDS:
        from jaxflow.envs.gymnax_cpu import GymnaxCPUEnv

        env, params = e.factory(env_id, **kwargs)
        return GymnaxCPUEnv(env, params, env_id, seed=(context or EnvContext()).seed)
    return flatten_observations(discrete_actions(e.factory(context or EnvContext(), **kwargs)), env_id)


def make_multiagent(env_id: str, context: EnvContext | None = None, **kwargs: Any) -> ParallelEnv:
    """Creates a multi-agent environment (a ``pettingzoo.ParallelEnv``)."""
    e = entry(env_id)
    if e.kind != "multiagent":
        raise EnvKindError(
            f"Environment {env_id!r} is a single-agent {e.kind} environment; create it with envs.make or envs.make_cpu."
        )
    return e.factory(context or EnvContext(), **kwargs)


def make_copies(
    make_fn: Callable[..., Any],
    env_id: str,
    num_envs: int,
    seed: int,
    env_config: dict[str, Any] | None,
    worker_index: int,
    incarnation: int,
) -> list[Any]:
    """A worker's ``num_envs`` copies of ``env_id``, copy i seeded ``seed + i``, made by
    ``make_fn`` (:func:`make_cpu` or :func:`make_multiagent`) with ``env_config``."""
    return [
        make_fn(env_id, EnvContext(worker_index, i, incarnation, seed + i), **(env_config or {}))
        for i in range(num_envs)
    ]


def _refuse_multiagent(e: EnvEntry) -> None:
    if e.kind == "multiagent":
        raise EnvKindError(
            f"Environment {e.id!r} is a multi-agent (PettingZoo Parallel API) environment: create it "
            f"with envs.make_multiagent, step it with envs.MultiAgentVectorEnv, and train on it with "
            f"a multi-agent config; single-agent algorithms cannot run it."
        )


def _gymnasium_factory(env_id: str) -> Callable[..., gymnasium.Env]:
    def factory(context: EnvContext, **kwargs: Any) -> gymnasium.Env:
        del context
        if is_mujoco_env(env_id):  # before its model compiles: not one deprecation line per env copy
            quiet_model_deprecations()
        return gymnasium.make(env_id, **kwargs)

    return factory


def _make_gymnax(env_id: str, **kwargs: Any):
    import gymnax

    from jaxflow.envs.memory_chain import corrected

    name = env_id[len(GYMNAX_PREFIX) :]
    env, params = gymnax.make(name)
    env = corrected(name, env)  # gymnax's ids whose conventions differ from gymnasium's
    if kwargs:
        params = params.replace(**kwargs)
    return env, params
