"""``jaxflow list``'s cache: what making every environment once found (its spaces, the
algorithms that fit it), kept under the user's cache directory so that the next listing makes
none and loads neither JAX nor gymnasium (one listing made them all in about 9 s of CPU).

A cache file's name is a hash of what the listing is made from (:func:`fingerprint`): the
Python, every installed distribution (each ``*.dist-info`` folder on ``sys.path``: its name,
which holds the version, and its modification time, which a reinstall changes) and jaxflow's
own source files (path, size and modification time: an editable install's edits change no
version). An install, an upgrade or an edit gives another name, so a listing made before is
never read again; writing one removes the others. What no distribution records (a system
library installed since, a download that failed) is not seen: a listing read from the cache
ends with a line on stderr saying so, and ``jaxflow list --refresh`` makes every env again.

The directory is ``$JAXFLOW_LIST_CACHE``, by default ``$XDG_CACHE_HOME/jaxflow/list``
(``~/.cache/jaxflow/list``); ``JAXFLOW_LIST_CACHE=off`` keeps no cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

CACHE_VARIABLE = "JAXFLOW_LIST_CACHE"
"""A directory, or ``off``; unset: :func:`default_directory`."""
OFF = "off"
FORMAT = 1
"""The layout of a cache file; a change of it is also a change of jaxflow's sources, so of the name."""
KEY_CHARS = 16
"""Hex digits of the fingerprint in a file's name (64 bits: no two states of an install collide)."""
_FILE = re.compile(rf"^listing-[0-9a-f]{{{KEY_CHARS}}}\.json$")
_DISTRIBUTION_SUFFIXES = (".dist-info", ".egg-info")


def default_directory() -> str:
    """``$XDG_CACHE_HOME/jaxflow/list``, or ``~/.cache/jaxflow/list``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxflow", "list")


def cache_directory(environ: Mapping[str, str] = os.environ) -> str | None:
    """Where listings are cached; None where ``JAXFLOW_LIST_CACHE=off``.

    >>> cache_directory({"JAXFLOW_LIST_CACHE": "off"}) is None
    True
    >>> cache_directory({"JAXFLOW_LIST_CACHE": "/tmp/lists"})
    '/tmp/lists'
    """
    chosen = environ.get(CACHE_VARIABLE, "")
    if chosen.lower() == OFF:
        return None
    return os.path.abspath(os.path.expanduser(chosen)) if chosen else default_directory()


def fingerprint() -> str:
    """A hash of the Python, the installed distributions and jaxflow's sources (about 15 ms)."""
    digest = hashlib.sha256(f"{FORMAT}\n{sys.version}\n{sys.prefix}\n".encode())
    for folder in sys.path:
        for name in sorted(_entries(folder)):
            if name.endswith(_DISTRIBUTION_SUFFIXES):
                digest.update(f"{folder}/{name} {_mtime(os.path.join(folder, name))}\n".encode())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the jaxflow package
    for folder, subfolders, files in os.walk(root, followlinks=True):  # envs/, algorithms/ are links
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            stat = os.stat(os.path.join(folder, name))
            digest.update(f"{os.path.relpath(folder, root)}/{name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _entries(folder: str) -> list[str]:
    try:
        return os.listdir(folder or ".")
    except OSError:  # a zip, or a folder gone: no distributions there
        return []


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


class ListingCache:
    """The sections of one listing (``"algorithms"``, each kind's rows) by name: read from the
    cache file of this install's :func:`fingerprint`, or made and written there."""

    def __init__(self, directory: str | None, refresh: bool = False):
        self.path = os.path.join(directory, f"listing-{fingerprint()[:KEY_CHARS]}.json") if directory else None
        self.sections: dict[str, Any] = {} if self.path is None else _read(self.path)
        self.made: float | None = self.sections.pop("made_at", None) if self.sections else None
        self.refresh = refresh
        """Every section asked for is made again (and replaced in the file; the others are kept)."""
        self.reused = False
        """Whether a section came from the file (what the listing's last line then says)."""

    def get(self, name: str, make: Callable[[], Any]) -> Any:
        """Section ``name``: the file's, else (or where refreshing) ``make()``, which is written to the file."""
        if name in self.sections and not self.refresh:
            self.reused = True
            return self.sections[name]
        self.sections[name] = value = make()
        self._write()
        return value

    def note(self) -> str:
        """The line saying where the listing came from (read from the cache), or where it is now
        cached, for stderr."""
        if not self.reused:
            return f"jaxflow: cached in {self.path}: the next listing reads it"
        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.made)) if self.made else "earlier"
        return (
            f"jaxflow: listed from the cache made {made} ({self.path}) for the packages installed now; "
            "`jaxflow list --refresh` makes every environment again"
        )

    def _write(self) -> None:
        if self.path is None:
            return
        self.made = self.made or time.time()
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".listing-", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"format": FORMAT, "made_at": self.made, **self.sections}, f)
                os.replace(temporary, self.path)  # whole or not at all, also with two listings at once
            finally:
                with contextlib.suppress(OSError):  # gone once replaced
                    os.remove(temporary)
        except OSError as e:
            self.path = None  # nothing more tried, nor said to be cached
            print(
                f"jaxflow: the listing is not cached ({e}); the next one makes every environment again", file=sys.stderr
            )
            return
        for name in _entries(folder):  # listings of earlier installs: never read again
            if _FILE.match(name) and name != os.path.basename(self.path):
                with contextlib.suppress(OSError):  # another listing removed it first
                    os.remove(os.path.join(folder, name))


def _read(path: str) -> dict[str, Any]:
    """The sections of the file at ``path``: empty where there is none or it is not one of ours."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.pop("format", None) != FORMAT:
        return {}
    return data
