"""``jaxflow list --algo NAME --fields``: every setting of an algorithm's config, group by group
(the part of the config it comes from), with its default and its docstring
(:mod:`jaxflow.config.field_docs`). Cached with the listing of the environments for the
command line (:mod:`~jaxflow.api.listing_cache`): the config's module imports JAX."""

from __future__ import annotations

import argparse
import functools
import re
import sys
import textwrap

from jaxflow.api.listing import algorithm_table, canonical_name
from jaxflow.api.listing_cache import ListingCache
from jaxflow.api.registry import get_algorithm
from jaxflow.config.field_docs import REQUIRED, FieldDoc, field_docs, group_doc
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import groups

WIDTH = 100
"""Columns a docstring is wrapped to."""
INDENT = " " * 6
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")  # Sphinx's :class:`~a.b.C` is shown as `C`


def check_fields_flags(args: argparse.Namespace) -> None:
    """Refuses ``--fields`` without ``--algo``, or with the flags of the environments' listing."""
    if args.algo is None:
        raise ConfigError("list --fields needs --algo NAME: the algorithm whose settings to show.")
    given = [flag for flag, value in (("--kind", args.kind), ("--all", args.all)) if value]
    if given:
        raise ConfigError(f"list --fields shows one algorithm's settings; it takes no {', '.join(given)}.")


def print_fields(algo: str, cache: str | None = None, refresh: bool = False) -> None:
    """Every setting of ``algo``'s config (:func:`fields_text`), from the listing cached in the
    folder ``cache`` where it holds them (see :func:`~jaxflow.api.listing.print_listing`)."""
    listing = ListingCache(cache, refresh)
    name = canonical_name(algo, listing.get("algorithms", algorithm_table)["names"])  # unknown: the closest named
    print(listing.get(f"fields {name}", functools.partial(fields_text, name)), end="")
    if listing.reused or listing.path:
        print(listing.note(), file=sys.stderr)


def fields_text(algo: str) -> str:
    """Every setting of ``algo``'s config: a heading per group, then each setting's name,
    default and docstring (loads the algorithm, and so JAX)."""
    spec = get_algorithm(algo)
    cls = spec.config_cls
    lines = [
        f"{spec.name}'s settings ({cls.__name__}): set them with --set NAME=VALUE (or GROUP.NAME=VALUE), "
        "or in a --config FILE"
    ]
    by_group: dict[str, list[FieldDoc]] = {}
    for doc in field_docs(cls):
        by_group.setdefault(doc.group, []).append(doc)
    held = groups(cls)
    for group, docs in by_group.items():
        title = f"{group} ({held[group].__name__})" if group in held else group
        lines += ["", textwrap.fill(f"{title}: {plain(group_doc(cls, group))}", WIDTH, subsequent_indent="  ")]
        for doc in docs:
            default = doc.default if doc.default is REQUIRED else repr(doc.default)  # a string quoted
            lines.append(f"  {doc.name} = {default}")
            for paragraph in plain(doc.doc).split("\n\n"):
                lines.append(textwrap.fill(paragraph, WIDTH, initial_indent=INDENT, subsequent_indent=INDENT))
    return "\n".join(lines) + "\n"


def plain(doc: str) -> str:
    """A docstring as a terminal shows it: Sphinx roles and double backticks as single
    backticks, each paragraph on one line.

    >>> plain("Rollout workers (see :class:`~jaxflow.config.RolloutConfig`);\\n``num_workers`` of them.")
    'Rollout workers (see `RolloutConfig`); `num_workers` of them.'
    """
    doc = _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", doc).replace("``", "`")
    return "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))
