"""POPGym's environments (Morad et al., 2023, "POPGym: Benchmarking Partially Observable
Reinforcement Learning") as ``"popgym/<Name>-v0"`` ids: tasks that need memory, for recurrent
policies on Ray rollout workers.

POPGym's base environments are numpy and gymnasium only (``pip install 'jaxflow-rl[popgym]'``);
its navigation envs (mazes, which need ``mazelib``) are left out. The package is imported when
one of its ids is used or listed. Importing it also registers its envs in gymnasium's registry
as ``"popgym-<Name>-v0"``; jaxflow lists them once, under ``popgym/``.

Each id's difficulty is in its name (``Easy``, ``Medium``, ``Hard``). Their rewards are scaled
so that an episode's return lies in ``[-1, 1]``, and every episode ends by the game's own rule
(a deck dealt, a step count reached). Observations are often ``Discrete``, ``MultiDiscrete`` or
``Tuple``: :mod:`jaxflow.envs.flatten` turns them into one-hot vectors as for any gymnasium env.

Example:
    >>> from jaxflow.envs.registry import make_cpu
    >>> env = make_cpu("popgym/RepeatPreviousEasy-v0")
    >>> env.observation_space, env.action_space
    (Box(0.0, 1.0, (4,), float32), Discrete(4))
"""

from __future__ import annotations

import difflib
import functools
import importlib.util

import gymnasium

POPGYM_PREFIX = "popgym/"
POPGYM_MODULE = "popgym"
POPGYM_EXTRA = "popgym"
"""The pip extra that installs POPGym: ``pip install 'jaxflow-rl[popgym]'``."""
POPGYM_GYMNASIUM_PREFIX = "popgym-"
"""How POPGym names its envs in gymnasium's registry, which its import fills."""


class MissingPOPGymError(ImportError):
    """A ``popgym/`` id where the popgym package is not installed."""


def popgym_installed() -> bool:
    """Whether popgym can be imported here (without importing it)."""
    return importlib.util.find_spec(POPGYM_MODULE) is not None


@functools.cache
def popgym_classes() -> dict[str, type[gymnasium.Env]]:
    """Each base env's id (``popgym/RepeatPreviousEasy-v0``, ...) and its class;
    :class:`MissingPOPGymError` where popgym is not installed."""
    if not popgym_installed():
        raise MissingPOPGymError(
            f"{POPGYM_PREFIX}<Name>-v0 ids need the {POPGYM_MODULE} package, which is not installed here: "
            f"pip install 'jaxflow-rl[{POPGYM_EXTRA}]'."
        )
    import popgym.envs as pe

    groups = (pe.ALL_DIAGNOSTIC, pe.ALL_CONTROL, pe.ALL_NOISY, pe.ALL_GAME)  # not ALL_NAVIGATION: mazelib's
    return {
        POPGYM_PREFIX + spec["id"].removeprefix(POPGYM_GYMNASIUM_PREFIX): cls
        for group in groups
        for cls, spec in group.items()
    }


def popgym_ids() -> list[str]:
    """The sorted ``popgym/`` ids ([] where popgym is not installed)."""
    return sorted(popgym_classes()) if popgym_installed() else []


def popgym_class(env_id: str) -> type[gymnasium.Env]:
    """The class of ``env_id``; :class:`MissingPOPGymError` where popgym is not installed, a
    ``LookupError`` naming the closest ids where it has no such env."""
    try:
        classes = popgym_classes()
    except MissingPOPGymError as e:
        raise MissingPOPGymError(f"Environment {env_id!r}: {e}") from None
    if env_id not in classes:
        close = difflib.get_close_matches(env_id, list(classes), n=5, cutoff=0.5) or sorted(classes)[:5]
        raise LookupError(f"Unknown environment {env_id!r}. Did you mean one of {close}?")
    return classes[env_id]
