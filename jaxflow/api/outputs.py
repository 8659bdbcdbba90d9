"""What jaxflow may write over: one rule for every path a command writes.

No command deletes or overwrites anything it did not write. An output path (``export --out``,
``evaluate --video``, ``plot --out``, a run's ``logdir``, ``tune --logdir``) may be

* a path that does not exist yet (it is created),
* an empty directory, where the output is a folder (nothing is lost),
* with ``overwrite`` (``--overwrite``), an earlier output of the same kind that jaxflow wrote
  and that holds nothing else: an export folder (its ``policy.json`` and files), a folder of
  videos (its ``videos.json`` and episodes), an image of learning curves (jaxflow's mark in
  its metadata), a run (its ``config.json`` or a checkpoint's ``meta.json``).

Anything else (a run where an export is asked for, the current folder, a folder of other
files, an unrelated file, a symbolic link) is refused by :func:`claim_output` with one
:class:`ConfigError` line naming the path and what is allowed, before anything starts.
:func:`written` then writes a whole output into a temporary sibling and moves it into place
when complete, so a failed or interrupted write leaves the earlier output or nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jaxflow.config.fields import ConfigError

EXPORTED_FILE, PARAMS_FILE, DESCRIPTION_FILE = "policy.jaxexport", "params.npz", "policy.json"
"""An export folder's files (:mod:`jaxflow.api.export`); ``policy.json`` describes it and marks it jaxflow's."""
VIDEOS_FILE = "videos.json"
"""A folder of videos' description: which checkpoint and env, each episode's file, return and length."""
VIDEOS_WRITER = "jaxflow evaluate --video"
"""``videos.json``'s ``written_by``: what marks a folder of videos as jaxflow's."""
EPISODE_VIDEO = re.compile(r"^episode_\d+\.mp4$")
PLOT_MARK = "jaxflow plot: learning curves"
"""Written into an image's metadata (PNG text, SVG and PDF creator) so a later plot knows it is jaxflow's."""
PLOT_FORMATS = (".png", ".svg", ".pdf")
"""The image formats ``plot --out`` writes: those whose metadata carries :data:`PLOT_MARK`."""
MAX_MARK_BYTES = 64 << 20
"""Larger files are never read for a mark: jaxflow's descriptions and plots are far smaller."""
SHOWN_NAMES = 3
"""How many of a folder's entries an error names before "..."."""
OVERWRITE_HINT = "replace it with --overwrite (overwrite=True), or pick a new path."
"""What to do with an earlier output, at the end of its refusal."""


@dataclass(frozen=True)
class OutputKind:
    """One kind of output: how the user names it, what it is, and how jaxflow knows its own."""

    flag: str
    """The option that names the path, as errors show it (``export --out``)."""
    noun: str
    """What one such output is, with its article (``an export``)."""
    folder: bool
    """A folder (``True``) or one file."""
    earlier: Callable[[str], bool] | None = None
    """True where a path holds such an output jaxflow wrote and nothing else; ``None``: never replaced."""
    whole: bool = True
    """Written as a whole into a temporary sibling and moved into place (a run's logdir is not:
    its files are written one by one into the folder)."""
    suffixes: tuple[str, ...] = ()
    """A file's allowed suffixes (its format), where restricted."""
    hint: str = OVERWRITE_HINT
    """What to do with an earlier output (``{path}``: the path given)."""


def claim_output(path: str, kind: OutputKind, overwrite: bool = False) -> None:
    """Returns if ``path`` may be written as a ``kind`` output (see the module's rule); raises
    a one-line :class:`ConfigError` naming the path and what is allowed otherwise."""
    allowed = _allowed(kind)
    _check_suffix(path, kind)
    if not os.path.lexists(path):
        _check_parent(path, kind, allowed)
        return
    if os.path.islink(path):  # jaxflow writes no links; what one leads to is not its output
        raise ConfigError(f"{kind.flag} {path!r} is a symbolic link; {allowed}")
    if kind.whole and _holds_cwd(path):
        raise ConfigError(f"{kind.flag} {path!r} is the current folder or one above it; {allowed}")
    if kind.folder != os.path.isdir(path):
        found, wanted = ("a directory", "a file") if os.path.isdir(path) else ("a file", "a directory")
        raise ConfigError(f"{kind.flag} {path!r} is {found}, not {wanted}; {allowed}")
    if kind.folder and not os.listdir(path):
        return
    shown = _shown(path)
    if kind.earlier is not None and kind.earlier(path):
        if overwrite:
            return
        held = f" ({shown})" if shown else ""
        raise ConfigError(f"{kind.flag} {path!r} already holds {kind.noun}{held}: {kind.hint.format(path=path)}")
    held = f": it holds {shown}" if shown else ""
    raise ConfigError(f"{kind.flag} {path!r} exists and is not {kind.noun} jaxflow wrote{held}; {allowed}")


@contextlib.contextmanager
def written(path: str, kind: OutputKind, overwrite: bool = False) -> Iterator[str]:
    """Yields a temporary sibling of ``path`` to write the whole output into (a new folder, or
    a file's name); when the block ends without error, moves it into place (the path claimed
    again, then an earlier output renamed aside, the new one renamed in, the earlier deleted),
    and in every case removes what is left of the temporary sibling."""
    claim_output(path, kind, overwrite)
    out = os.path.abspath(path)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = f"{out}.tmp-{uuid.uuid4().hex[:8]}"
    if kind.folder:
        os.mkdir(tmp)
    try:
        yield tmp
        claim_output(path, kind, overwrite)  # again: the path may have changed while the output was written
        _move_into_place(tmp, out)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.lexists(tmp):
            os.remove(tmp)


def _move_into_place(tmp: str, out: str) -> None:
    if not os.path.isdir(tmp):
        os.replace(tmp, out)  # one file: atomic, over an earlier one claimed above
        return
    aside = None
    if os.path.isdir(out) and not os.listdir(out):
        os.rmdir(out)  # an empty folder: nothing to keep aside
    elif os.path.lexists(out):  # an earlier output, aside first: a crash between the renames keeps it
        aside = f"{out}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, aside)
    os.rename(tmp, out)
    if aside is not None:
        shutil.rmtree(aside)


def _allowed(kind: OutputKind) -> str:
    """What ``kind``'s path may be, as the end of a refusal."""
    places = ["a new path"] + (["an empty directory"] if kind.folder else [])
    if kind.earlier is None:
        return f"jaxflow writes only to {' or '.join(places)}."
    return f"jaxflow writes only to {', '.join(places)} or (with --overwrite) {kind.noun} it wrote earlier."


def _check_suffix(path: str, kind: OutputKind) -> None:
    suffix = os.path.splitext(path)[1]
    if kind.suffixes and suffix.lower() not in kind.suffixes:
        raise ConfigError(
            f"{kind.flag} {path!r}: the file's suffix names its format, one of {', '.join(kind.suffixes)}; "
            f"got {suffix or 'none'}."
        )


def _check_parent(path: str, kind: OutputKind, allowed: str) -> None:
    """The nearest existing folder above a new ``path`` must be a writable directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{kind.flag} {path!r}: {parent!r} is a file, not a directory; {allowed}")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{kind.flag} {path!r} cannot be created: {parent!r} is not writable.")


def _holds_cwd(path: str) -> bool:
    """True for the current folder and the folders above it, which are never replaced."""
    target, cwd = os.path.realpath(path), os.path.realpath(os.getcwd())
    return cwd == target or cwd.startswith(target.rstrip(os.sep) + os.sep)


def _shown(path: str) -> str:
    """The first entries of a folder, for an error (``a, b, c, ...``); ``""`` for a file."""
    if not os.path.isdir(path):
        return ""
    names = sorted(os.listdir(path))
    return ", ".join(names[:SHOWN_NAMES]) + (", ..." if len(names) > SHOWN_NAMES else "")


def read_json(path: str) -> Any:
    """The JSON in ``path``, or ``None`` where it is missing, too large or no JSON: a mark is
    read without trusting the file."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_MARK_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _holds_only(folder: str, marker: str, listed: Any) -> bool:
    """True where ``folder`` holds ``marker`` and otherwise only the names ``listed``."""
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return False
    return set(os.listdir(folder)) <= {marker, *listed}


def is_export(path: str) -> bool:
    """True for a folder :func:`~jaxflow.api.export.export_policy` wrote: a ``policy.json``
    of an export, and only the files it names."""
    description = read_json(os.path.join(path, DESCRIPTION_FILE))
    if not isinstance(description, dict) or not isinstance(description.get("format"), int):
        return False
    files = description.get("files")
    return isinstance(files, dict) and _holds_only(path, DESCRIPTION_FILE, list(files.values()))


def is_videos(path: str) -> bool:
    """True for a folder ``jaxflow evaluate --video`` wrote: its ``videos.json`` and the
    episodes it lists."""
    description = read_json(os.path.join(path, VIDEOS_FILE))
    if not isinstance(description, dict) or description.get("written_by") != VIDEOS_WRITER:
        return False
    episodes = description.get("episodes")
    names = [e.get("file") for e in episodes if isinstance(e, dict)] if isinstance(episodes, list) else None
    return _holds_only(path, VIDEOS_FILE, names)


def is_plot(path: str) -> bool:
    """True for an image ``jaxflow plot`` wrote: :data:`PLOT_MARK` in its metadata."""
    try:
        if os.path.getsize(path) > MAX_MARK_BYTES:
            return False
        with open(path, "rb") as f:
            return PLOT_MARK.encode() in f.read()
    except OSError:
        return False


def write_videos_description(folder: str, result: Mapping[str, Any], env: str, checkpoint: str) -> None:
    """``videos.json`` in a folder of evaluated episodes: the checkpoint, the env, and each
    episode's file, return and length (what marks the folder as jaxflow's)."""
    episodes = [
        {"file": os.path.basename(video), "return": ret, "length": length}
        for video, ret, length in zip(result["videos"], result["returns"], result["lengths"])
    ]
    description = {"written_by": VIDEOS_WRITER, "checkpoint": os.path.abspath(checkpoint), "env": env}
    with open(os.path.join(folder, VIDEOS_FILE), "w", encoding="utf-8") as f:
        json.dump({**description, "episodes": episodes}, f, indent=1)


EXPORT = OutputKind("export --out", "an export", folder=True, earlier=is_export)
VIDEOS = OutputKind("evaluate --video", "a folder of videos", folder=True, earlier=is_videos)
PLOT = OutputKind("plot --out", "a plot", folder=False, earlier=is_plot, suffixes=PLOT_FORMATS)
TUNE = OutputKind("tune --logdir", "an experiment", folder=True, whole=False)
"""Tune writes into its experiment's folder; an earlier experiment is never replaced."""
