"""What ``jaxflow list`` shows: the algorithms, and the environments they can train, each
with its spaces and the algorithms that fit them.

By default only what a new user should reach for: the newest version of each gymnasium id
that can be made here (not the raw-frame Atari ids, which ``ALE/<Game>-v5`` preprocesses, and
not ids whose dependencies are missing), the ``ALE/`` games as one line, gymnax, Brax, the JAX
libraries (craftax, xminigrid, navix, jumanji: one line each, its example made) and the
multi-agent games. ``--all`` lists every id, with why the hidden ones are hidden.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import NamedTuple

import gymnasium
import numpy as np

from jaxflow import envs
from jaxflow.api.cli_args import ENV_KINDS as KINDS
from jaxflow.api.registry import (
    algorithms_for_space,
    device_algorithms,
    get_algorithm,
    list_algorithms,
    multiagent_algorithms,
)
from jaxflow.api.spaces import check_spaces
from jaxflow.api.spec import ACTION_SPACES
from jaxflow.config.fields import ConfigError
from jaxflow.envs.jax_libraries import EXTRA, Family
from jaxflow.envs.jax_library_adapters import FAMILIES, installed, library_ids

ALE_EXAMPLE = "ALE/Pong-v5"
"""The game whose spaces stand for every ``ALE/<Game>-v5`` id (84x84 frames, Discrete actions)."""
MESSAGE_CHARS = 80
"""How much of the error of an env that cannot be made ``--all`` shows."""
UNBOUNDED = 1e30
"""Bounds this large (a float32's largest, as some gymnax envs give) are shown as no bounds."""
_RAW_ATARI = re.compile(r"^[A-Z]\w*?(NoFrameskip)?-v[04]$")
_VERSION = re.compile(r"^(.*)-v(\d+)$")


class EnvRow(NamedTuple):
    """One environment as listed: its spaces and the algorithms that can train it, or why not."""

    id: str
    observation: str = ""
    action: str = ""
    algorithms: tuple[str, ...] = ()
    hidden: str = ""
    """Why the default listing leaves it out ("" where it is shown)."""


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


def fitting_algorithms(env_id: str, obs: gymnasium.Space, action: gymnasium.Space, device: bool) -> tuple[str, ...]:
    """The algorithms that can train ``env_id`` (in device mode only, where ``device``)."""
    names = device_algorithms() if device else list_algorithms()
    fits = []
    for name in names:
        spec = get_algorithm(name)
        if spec.run.program is not None:  # MAML trains on task distributions, not on one env
            continue
        if not device and spec.plan is None:  # an algorithm without a Ray-mode plan
            continue
        try:
            check_spaces(spec, env_id, obs, action)
        except ConfigError:
            continue
        fits.append(name)
    return tuple(fits)


def env_rows(kind: str, everything: bool = False) -> list[EnvRow]:
    """The rows of one kind of environment (see the module's docstring for what is hidden)."""
    if kind == "jaxlib":
        return [row for family in FAMILIES for row in _family_rows(family, everything)]
    ids = envs.list_envs(kind)
    if kind == "multiagent":
        return [EnvRow(i, algorithms=tuple(multiagent_algorithms())) for i in ids]
    rows = []
    ale = [i for i in ids if i.startswith("ALE/")]
    if ale:  # one game made stands for all: the same preprocessing, each game its own actions
        example = _probe(ALE_EXAMPLE)
        rows.append(example._replace(id=f"ALE/<Game>-v5 ({len(ale)} games, e.g. {ALE_EXAMPLE})"))
        rows += [EnvRow(i, algorithms=example.algorithms) for i in ale if everything]
    for env_id in ids:
        reason = "" if env_id in ale else _hidden_reason(env_id, ids)
        if env_id in ale or reason:  # --all lists the hidden with their reason, not made
            rows += [EnvRow(env_id, hidden=reason)] if reason and everything else []
            continue
        # Brax envs are all Box-action control tasks: making each one (a compile) tells nothing more.
        row = _probe(env_id) if kind != "brax" else EnvRow(env_id, algorithms=_box_device())
        rows += [row] if everything or not row.hidden else []
    return rows


def _family_rows(family: Family, everything: bool) -> list[EnvRow]:
    """A JAX library as one line (its example made for the spaces, which differ between its
    envs; ``--all``: every id, unmade), or, where it is not installed, why (``--all`` only)."""
    if not installed(family):
        return [
            EnvRow(f"{family.prefix}<name>", hidden=f"not installed: pip install 'jaxflow-rl[{EXTRA}]'")
        ] * everything
    ids = library_ids(family)
    example = _probe(family.prefix + family.example)
    rows = [example._replace(id=f"{family.prefix}<name> ({len(ids)} envs, e.g. {example.id})")]
    return rows + [EnvRow(i) for i in ids if everything]


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
    device = envs.entry(env_id).kind in envs.JAX_KINDS
    fits = fitting_algorithms(env_id, obs, action, device)
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


def print_listing(kinds: tuple[str, ...] = KINDS, algo: str | None = None, everything: bool = False) -> None:
    """``jaxflow list``: the algorithms, then each kind's environments (only those ``algo`` fits)."""
    print("algorithms:", ", ".join(list_algorithms()))
    for space in ACTION_SPACES:
        print(f"for {space} action spaces:", ", ".join(algorithms_for_space(space)))
    print("with device mode (gymnax and brax envs):", ", ".join(device_algorithms()))
    print("for policies of multi-agent runs (--multiagent FILE):", ", ".join(multiagent_algorithms()))
    for kind in kinds:
        rows = [r for r in env_rows(kind, everything) if algo is None or algo.upper() in r.algorithms]
        print(f"{kind} environments ({len(rows)}{'' if everything else ' you can train; --all for every id'}):")
        for line in _format(kind, rows):
            print("  " + line)
    tasks = envs.list_task_distributions()
    print(f"task distributions for MAML ({len(tasks)}):")
    print("  " + "\n  ".join(tasks))


def _format(kind: str, rows: list[EnvRow]) -> list[str]:
    if kind == "brax" and not any(r.observation for r in rows):
        return [", ".join(r.id for r in rows), f"(Box actions, device mode: {' '.join(_box_device())})"] if rows else []
    width = max((len(r.id) for r in rows), default=0)
    out = []
    for r in rows:
        spaces = f"obs {r.observation:<22} act {r.action:<16} " if r.observation else ""
        out.append(f"{r.id:<{width}}  {spaces}{' '.join(r.algorithms)}{f'  ({r.hidden})' if r.hidden else ''}")
    return out


def _box_device() -> tuple[str, ...]:
    return tuple(n for n in algorithms_for_space("Box") if n in device_algorithms())
