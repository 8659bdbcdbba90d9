"""Which keyword arguments (``env_config``) an environment takes, checked before anything starts.

``env_config`` reaches the environment's constructor as keyword arguments. An unknown key
would otherwise fail inside a Ray worker as a traceback; here it fails first, as one line
naming the env, the key and the options the env documents (its constructor's parameters,
or a gymnax env's ``EnvParams`` fields). Environments that check their own options
(``ALE/`` ids through :class:`~jaxflow.envs.atari.AtariConfig`, ``brax/`` ids), i.e.
factories that take ``**kwargs``, are left to themselves.

A checkpoint's ``env_config`` is data, not instructions: keys in :data:`USER_ONLY_OPTIONS`
(how the env shows itself, e.g. ``render_mode="human"``) are the user's to set, never a file's.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium

from jaxflow.envs.registry import entry
from jaxflow.envs.user_envs import REGISTERED, EnvEntry

USER_ONLY_OPTIONS = ("render_mode",)
"""Options a checkpoint may not set: they act on the user's machine (windows, files), not on
the task the policy was trained on."""

MAKE_OPTIONS = ("max_episode_steps",)
"""``gymnasium.make``'s own keyword that changes the task (the time limit); its other
keywords (checkers, wrappers' switches) are not environment settings."""


class EnvOptionError(ValueError):
    """An ``env_config`` key the environment does not take, or one a checkpoint may not set."""


def check_env_config(env_id: str, env_config: Mapping[str, Any], source: str = "env_config") -> None:
    """Raises :class:`EnvOptionError` for a key of ``env_config`` that ``env_id`` does not take
    (with the closest options); ``source`` names where the keys came from in the message.

    Example:
        >>> check_env_config("CartPole-v1", {"sutton_barto_reward": True})
        >>> check_env_config("CartPole-v1", {"render": "human"})
        Traceback (most recent call last):
        ...
        jaxflow.envs.options.EnvOptionError: CartPole-v1: env_config key 'render' is not an option of this environment. Did you mean ['render_mode']? Allowed: max_episode_steps, render_mode, sutton_barto_reward.
    """
    allowed = env_options(env_id)
    if allowed is None:
        return
    for key in env_config:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.5)
            hint = f" Did you mean {close}?" if close else ""
            raise EnvOptionError(
                f"{env_id}: {source} key {key!r} is not an option of this environment.{hint} "
                f"Allowed: {', '.join(allowed) or 'none'}."
            )


def check_file_env_config(env_id: str, env_config: Mapping[str, Any], source: str) -> None:
    """:func:`check_env_config` for an ``env_config`` read from a file (a checkpoint): also
    refuses :data:`USER_ONLY_OPTIONS`."""
    user_only = [k for k in env_config if k in USER_ONLY_OPTIONS]
    if user_only:
        raise EnvOptionError(
            f"{source}: env_config sets {user_only[0]!r}, which is the user's to choose, not a file's "
            f"(options a file may not set: {', '.join(USER_ONLY_OPTIONS)})."
        )
    check_env_config(env_id, env_config, source)


def env_options(env_id: str) -> list[str] | None:
    """The sorted option names ``env_id`` takes, or None where it checks them itself or takes any."""
    e = entry(env_id)
    if e.kind == "gymnax":
        return _gymnax_options(e)
    if e.kind in ("brax", "jaxlib"):  # brax_envs and the JAX libraries check their own
        return None
    if env_id not in REGISTERED and env_id in gymnasium.registry:  # gymnasium's registry
        return _gymnasium_options(env_id)
    return _factory_options(e)


def _gymnax_options(e: EnvEntry) -> list[str] | None:
    _, params = e.factory(e.id)
    return sorted(f.name for f in dataclasses.fields(params)) if dataclasses.is_dataclass(params) else None


def _gymnasium_options(env_id: str) -> list[str] | None:
    entry_point = gymnasium.spec(env_id).entry_point
    creator: Callable[..., Any]
    if isinstance(entry_point, str):
        try:
            creator = gymnasium.envs.registration.load_env_creator(entry_point)
        except (ImportError, gymnasium.error.Error):  # e.g. Box2D missing: creating the env says so
            return None
    elif entry_point is None:
        return None
    else:
        creator = entry_point
    names = _parameters(creator)
    return None if names is None else sorted(set(names) | set(MAKE_OPTIONS))


def _factory_options(e: EnvEntry) -> list[str] | None:
    plain = getattr(e.factory, "plain", None)  # registry.PlainFactory: no context parameter
    if plain is not None:
        names = _parameters(plain)
        return None if names is None else sorted(names)
    names = _parameters(e.factory)
    # A registered factory's first parameter is the EnvContext the registry passes.
    return None if names is None else sorted(names[1:])


def _parameters(fn: Callable[..., Any]) -> list[str] | None:
    """Keyword parameter names of ``fn`` (a class: its ``__init__``), None if it takes ``**kwargs``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
