"""What ``jaxflow list`` finds by making things: every algorithm loaded, each environment made
once for its spaces, and the algorithms that can train it (what :mod:`~jaxflow.api.listing`
prints, and caches: this module imports JAX, gymnasium and every algorithm).

An algorithm fits an env when it trains envs of that kind (:func:`trained_kinds`) and its
:func:`~jaxflow.api.spaces.check_spaces` accepts the env's spaces. Hidden by default, shown
with their reason under ``--all``: the raw-frame Atari ids (``ALE/<Game>-v5`` preprocesses
them), older versions of an id, and the envs that cannot be made here; the ``ALE/`` games and
each JAX library's envs are one line, one of them made, their ids under ``--all``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from jaxflow import envs
from jaxflow.api.listing import EnvRow
from jaxflow.api.registry import (
    algorithms_for_space,
    device_algorithms,
    get_algorithm,
    list_algorithms,
    multiagent_algorithms,
)
from jaxflow.api.spaces import check_spaces
from jaxflow.api.spec import ACTION_SPACES, AlgorithmSpec
from jaxflow.config.fields import ConfigError

if TYPE_CHECKING:  # the JAX libraries' module imports gymnax (seconds): only where jaxlib is listed
    from jaxflow.envs.jax_libraries import Family

ALE_EXAMPLE = "ALE/Pong-v5"
"""The game whose spaces stand for every ``ALE/<Game>-v5`` id (84x84 frames, Discrete actions)."""
MESSAGE_CHARS = 80
"""How much of the error of an env that cannot be made ``--all`` shows."""
UNBOUNDED = 1e30
"""Bounds this large (a float32's largest, as some gymnax envs give) are shown as no bounds."""
_RAW_ATARI = re.compile(r"^[A-Z]\w*?(NoFrameskip)?-v[04]$")
_VERSION = re.compile(r"^(.*)-v(\d+)$")


def algorithm_table() -> dict[str, Any]:
    """The listing's first lines: the algorithms, by action space, with device mode, for multi-agent runs."""
    return {
        "names": list_algorithms(),
        "spaces": {space: algorithms_for_space(space) for space in ACTION_SPACES},
        "device": device_algorithms(),
        "multiagent": multiagent_algorithms(),
    }


def trained_kinds(spec: AlgorithmSpec) -> tuple[str, ...]:
    """The kinds of environment ``spec``'s algorithm trains: a program's own ``program_kinds``;
    a standard program's gymnasium envs where it has a Ray-mode plan and the JAX kinds where it
    has device mode."""
    if spec.run.program is not None:
        return spec.run.program_kinds
    return ("gymnasium",) * (spec.plan is not None) + envs.JAX_KINDS * (spec.run.device is not None)


def describe_space(space: gymnasium.Space) -> str:
    """A short form of a space: ``Discrete(2)``, ``Box(4,) float32``, ``Box(1,) [-2, 2]``.

    >>> describe_space(gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    'Box(1,) [-2, 2]'
    >>> describe_space(gymnasium.spaces.Discrete(6))
    'Discrete(6)'
    """
    if isinstance(space, gymnasium.spaces.Box):
        low, high = float(space.low.min()), float(space.high.max())
        if max(-low, high) < UNBOUNDED and space.dtype != np.uint8:
            return f"Box{tuple(space.shape)} [{low:g}, {high:g}]"
        return f"Box{tuple(space.shape)} {space.dtype}"
    if isinstance(space, gymnasium.spaces.Discrete):
        return f"Discrete({int(space.n)})"
    return str(space)


def fitting_algorithms(kind: str, env_id: str, obs: gymnasium.Space, action: gymnasium.Space) -> tuple[str, ...]:
    """The algorithms that can train ``env_id``, an env of ``kind`` with these spaces."""
    fits = []
    for name in list_algorithms():
        spec = get_algorithm(name)
        if kind not in trained_kinds(spec):
            continue
        try:
            check_spaces(spec, env_id, obs, action)
        except ConfigError:
            continue
        fits.append(name)
    return tuple(fits)


def env_rows(kind: str) -> list[EnvRow]:
    """Every row of one kind of environment, the hidden ones with their reason."""
    if kind == "jaxlib":
        from jaxflow.envs.jax_library_adapters import FAMILIES

        return [row for family in FAMILIES for row in _family_rows(family)]
    if kind == "tasks":
        return [_task_row(task_id) for task_id in envs.list_task_distributions()]
    ids = envs.list_envs(kind)
    if kind == "multiagent":
        return [EnvRow(i, algorithms=tuple(multiagent_algorithms())) for i in ids]
    if kind == "brax":  # Brax envs are all Box-action control tasks: making each one (a compile) tells nothing more
        box = tuple(n for n in algorithms_for_space("Box") if kind in trained_kinds(get_algorithm(n)))
        return [EnvRow(i, algorithms=box) for i in ids]
    rows = []
    ale = [i for i in ids if i.startswith("ALE/")]
    if ale:  # one game made stands for all: the same preprocessing, each game its own actions
        example = _probe(ALE_EXAMPLE)
        rows.append(example._replace(id=f"ALE/<Game>-v5 ({len(ale)} games, e.g. {ALE_EXAMPLE})"))
        rows += [EnvRow(i, algorithms=example.algorithms, detail=True) for i in ale]
    for env_id in (i for i in ids if i not in ale):
        reason = _hidden_reason(env_id, ids)
        rows.append(EnvRow(env_id, hidden=reason) if reason else _probe(env_id))  # the hidden are not made
    return rows


def _family_rows(family: Family) -> list[EnvRow]:
    """A JAX library as one line (its example made for the spaces, which differ between its
    envs) and its ids, or, where it is not installed, why."""
    from jaxflow.envs.jax_libraries import EXTRA
    from jaxflow.envs.jax_library_adapters import installed, library_ids

    if not installed(family):
        return [EnvRow(f"{family.prefix}<name>", hidden=f"not installed: pip install 'jaxflow-rl[{EXTRA}]'")]
    ids = library_ids(family)
    example = _probe(family.prefix + family.example)
    rows = [example._replace(id=f"{family.prefix}<name> ({len(ids)} envs, e.g. {example.id})")]
    return rows + [EnvRow(i, detail=True) for i in ids]


def _task_row(task_id: str) -> EnvRow:
    """A task distribution, its spaces those of its tasks' env."""
    from jaxflow.envs.gymnax_cpu import to_gymnasium_space

    tasks = envs.make_task_distribution(task_id)
    obs = to_gymnasium_space(tasks.env.observation_space(tasks.default_params))
    action = to_gymnasium_space(tasks.env.action_space(tasks.default_params))
    fits = fitting_algorithms("tasks", task_id, obs, action)
    return EnvRow(task_id, describe_space(obs), describe_space(action), fits)


def _hidden_reason(env_id: str, ids: list[str]) -> str:
    if _RAW_ATARI.match(env_id) and f"ALE/{env_id.split('-')[0].removesuffix('NoFrameskip')}-v5" in ids:
        return "raw Atari frames: ALE/<Game>-v5 comes preprocessed"
    match = _VERSION.match(env_id)
    if match and any(f"{match[1]}-v{v}" in ids for v in range(int(match[2]) + 1, int(match[2]) + 10)):
        return "a newer version exists"
    return ""


def _probe(env_id: str) -> EnvRow:
    """The env made once, for its spaces; an env that cannot be made is hidden, saying why."""
    try:
        with _quiet():
            env = envs.make_cpu(env_id)
            obs, action = env.observation_space, env.action_space
            env.close()
    except Exception as e:  # any missing dependency or broken registration: listed under --all
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:MESSAGE_CHARS]
        return EnvRow(env_id, hidden=f"cannot be made here: {why}")
    fits = fitting_algorithms(envs.entry(env_id).kind, env_id, obs, action)
    reason = "" if fits else "no algorithm here acts in its spaces"
    return EnvRow(env_id, describe_space(obs), describe_space(action), fits, reason)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Deprecation notes and the banners emulators and physics libraries print from C (to the
    process's own stdout and stderr) kept off the listing while envs are made."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
