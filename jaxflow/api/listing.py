"""What ``jaxflow list`` shows: the algorithms, and the environments they can train, each
with its spaces and the algorithms that fit them.

By default only what a new user should reach for: the newest version of each gymnasium id
that can be made here (not the raw-frame Atari ids, which ``ALE/<Game>-v5`` preprocesses, and
not ids whose dependencies are missing), the ``ALE/`` games as one line, gymnax, Brax, the JAX
libraries (craftax, xminigrid, navix, jumanji: one line each, its example made), the
multi-agent games and MAML's task distributions. ``--all`` lists every id, with why the hidden
ones are hidden. A kind with nothing to show (``--algo MAML``: every kind but the task
distributions) is left out, heading included.

What is shown is found by :mod:`~jaxflow.api.listing_probe` (every algorithm loaded, every env
made: seconds of CPU) and, for the command line, cached by :mod:`~jaxflow.api.listing_cache`;
this module imports neither JAX nor gymnasium, so a listing from the cache takes a fraction of
a second.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from jaxflow.api.cli_args import ENV_KINDS as KINDS
from jaxflow.api.listing_cache import ListingCache, cache_directory
from jaxflow.api.registry import unknown_algorithm

TITLES = {"tasks": "task distributions"}
"""A kind's heading, where it is not ``<kind> environments``."""


class EnvRow(NamedTuple):
    """One environment as listed: its spaces and the algorithms that can train it, or why not."""

    id: str
    observation: str = ""
    action: str = ""
    algorithms: tuple[str, ...] = ()
    hidden: str = ""
    """Why the default listing leaves it out ("" where it is shown)."""
    detail: bool = False
    """One id of a group the default listing shows as one line (an ``ALE/`` game, a JAX library's env)."""


def list_command(args: argparse.Namespace, own_process: bool) -> int:
    """``jaxflow list``; ``own_process``: run as a command, in a process of its own, which knows
    only what jaxflow and the installed packages register. Only such a listing reads and writes
    the cache: one made in a process holding registrations of its own would show them to later ones."""
    cache = cache_directory() if own_process else None
    if args.fields:
        from jaxflow.api.listing_fields import check_fields_flags, print_fields

        check_fields_flags(args)
        print_fields(args.algo, cache, args.refresh)
        return 0
    # An unknown --algo is refused from the listing's names: it would list no environment, as if none fitted it.
    print_listing(tuple(args.kind) if args.kind else KINDS, args.algo, args.all, cache, args.refresh)
    return 0


def print_listing(
    kinds: tuple[str, ...] = KINDS,
    algo: str | None = None,
    everything: bool = False,
    cache: str | None = None,
    refresh: bool = False,
) -> None:
    """``jaxflow list``: the algorithms, then each kind's environments (only those ``algo``
    fits; every id with ``everything``), from the listing cached in the folder ``cache`` where
    it holds one for this install (``refresh``: made again), else made (and cached there)."""
    listing = ListingCache(cache, refresh)
    table = listing.get("algorithms", algorithm_table)
    name = None if algo is None else canonical_name(algo, table["names"])
    print("algorithms:", ", ".join(table["names"]))
    for space, names in table["spaces"].items():
        print(f"for {space} action spaces:", ", ".join(names))
    print("with device mode (gymnax and brax envs):", ", ".join(table["device"]))
    print("for policies of multi-agent runs (--multiagent FILE):", ", ".join(table["multiagent"]))
    shown = 0
    for kind in kinds:
        rows = _shown(listing.get(kind, functools.partial(_env_rows, kind)), everything, name)
        if not rows:  # no heading over nothing
            continue
        shown += 1
        count = f"{len(rows)}{'' if everything else ' you can train; --all for every id'}"
        print(f"{TITLES.get(kind, f'{kind} environments')} ({count}):")
        for line in _format(kind, rows):
            print("  " + line)
    if not shown:
        print(f"no {' or '.join(kinds)} environment here{f' that {name} can train' if name else ''}")
    if listing.reused or listing.path:
        print(listing.note(), file=sys.stderr)


def canonical_name(algo: str, names: Sequence[str]) -> str:
    """The listed name ``algo`` means (case-insensitive), or a ``ConfigError`` naming the closest.

    >>> canonical_name("rainbow", ["PPO", "Rainbow"])
    'Rainbow'
    """
    for name in names:
        if name.upper() == algo.upper():
            return name
    raise unknown_algorithm(algo, [n.upper() for n in names], list(names))


def algorithm_table() -> dict[str, Any]:
    """The listing's first lines (:func:`~jaxflow.api.listing_probe.algorithm_table`: every algorithm loaded)."""
    from jaxflow.api import listing_probe

    return listing_probe.algorithm_table()


def _env_rows(kind: str) -> list[EnvRow]:
    from jaxflow.api.listing_probe import env_rows

    print(f"jaxflow: making the {TITLES.get(kind, f'{kind} environments')} for their spaces", file=sys.stderr)
    return env_rows(kind)


def _shown(rows: list[Sequence[Any]], everything: bool, name: str | None) -> list[EnvRow]:
    """The rows to print (as made, or as JSON kept them: lists): those the default listing
    shows, or ``everything``; only those ``name`` fits, where given."""
    out = [EnvRow(*r) for r in rows]
    out = [r._replace(algorithms=tuple(r.algorithms)) for r in out if everything or not (r.hidden or r.detail)]
    return [r for r in out if name is None or name in r.algorithms]


def _format(kind: str, rows: list[EnvRow]) -> list[str]:
    if kind == "brax" and not any(r.observation for r in rows):  # Brax's envs: none made, all alike
        return [", ".join(r.id for r in rows), f"(Box actions, device mode: {' '.join(rows[0].algorithms)})"]
    width = max(len(r.id) for r in rows)
    out = []
    for r in rows:
        spaces = f"obs {r.observation:<22} act {r.action:<16} " if r.observation else ""
        out.append(f"{r.id:<{width}}  {spaces}{' '.join(r.algorithms)}{f'  ({r.hidden})' if r.hidden else ''}")
    return out
