"""Checkpoints: learner state with orbax, config and counters as JSON, never pickled classes.

A checkpoint is a directory ``checkpoint_<iteration>/`` holding ``state/`` (orbax),
``meta.json`` (format version, algorithm, config, counters and what the program records of
its files, e.g. each replay shard's size), any files of the program (replay contents) and, written last, ``manifest.json``: every other file's size and SHA-256.
It is written under a temporary name and renamed when complete; an existing checkpoint of
the same iteration is renamed aside first and deleted last, so a write interrupted at any
point leaves a loadable checkpoint. :func:`verify` reads a checkpoint without trusting it
(nothing is unpickled, nothing restored) and :func:`search` picks the newest one that
verifies, reporting those it skips. The arrays of ``state/`` are checked and restored by
:mod:`jaxflow.api.checkpoint_state`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import orbax.checkpoint as ocp

from jaxflow import envs
from jaxflow.api import manifest
from jaxflow.api.logdir import CHECKPOINT_META
from jaxflow.api.registry import get_algorithm
from jaxflow.api.retention import named_best
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import from_json_dict
from jaxflow.replay import saved as saved_replay

FORMAT_VERSION = 2
UNSEALED_FORMAT = 1  # written before manifests: loads, unverified
META = CHECKPOINT_META  # also what marks a folder of checkpoints as a jaxflow run (api/logdir.py)
# meta.json's keys and their JSON types (bool is not an int here).
META_KEYS: dict[str, type] = {
    "format_version": int,
    "iteration": int,
    "algorithm": str,
    "config": dict,
    "context": dict,
}

_NAME = re.compile(r"^checkpoint_(\d+)$")
_ASIDE = re.compile(r"^\.old-checkpoint_(\d+)-[0-9a-f]+$")
_ID_CHARS = 8
"""Hex digits of the random id in the names of :func:`save`'s temporary and set-aside folders."""
_UNFINISHED = re.compile(rf"^\.tmp-checkpoint_\d+-[0-9a-f]{{{_ID_CHARS}}}$")
"""The temporary folder of a save not (yet) renamed into place: what a killed save leaves."""

log = logging.getLogger(__name__)
_WARNED_UNSEALED: set[str] = set()
"""Format-1 checkpoints this process has warned of (:func:`verify`)."""


class CheckpointError(ConfigError):
    """A checkpoint that does not verify or load, or no loadable checkpoint: one line naming
    the checkpoint and what is wrong (a ``ConfigError``, so the CLI exits with status 2)."""


def fail(path: str, what: str) -> CheckpointError:
    """The one-line error for checkpoint ``path``."""
    return CheckpointError(f"checkpoint {path}: {' '.join(what.split())}")


def save(
    directory: str,
    iteration: int,
    state: Any,
    meta: Mapping[str, Any],
    write_extra: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> str:
    """Writes ``state`` (a pytree of arrays) and ``meta`` atomically; returns the checkpoint path.
    An earlier checkpoint of that iteration there is replaced; anything else of that name is
    refused (:class:`CheckpointError`), before anything is written.

    ``write_extra(path)`` may add files (e.g. replay contents) to the checkpoint before
    it is sealed and renamed into place, so they are part of the same all-or-nothing write;
    what it returns (e.g. each replay shard's size and capacity) is added to ``meta.json``.
    """
    directory = os.path.abspath(directory)
    name = f"checkpoint_{iteration:06d}"
    final = os.path.join(directory, name)
    if os.path.lexists(final) and not os.path.isfile(os.path.join(final, META)):
        # Only a checkpoint replaces another (a resumed run saving again): never what jaxflow did not write.
        raise fail(
            final, f"exists and is not a jaxflow checkpoint (it has no {META}); it is left as it is: save elsewhere"
        )
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{name}-{uuid.uuid4().hex[:_ID_CHARS]}")
    try:
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(os.path.join(tmp, "state"), jax.device_get(state))
        recorded = write_extra(tmp) if write_extra is not None else None
        _write_meta(tmp, dict(meta, **(recorded or {}), format_version=FORMAT_VERSION, iteration=iteration))
        manifest.write_manifest(tmp)
        _replace(tmp, final, os.path.join(directory, f".old-{name}-{uuid.uuid4().hex[:_ID_CHARS]}"))
        for stale in candidates(directory):  # older copies of this iteration, left by writes killed mid-replace
            if os.path.basename(stale).startswith(f".old-{name}-"):
                shutil.rmtree(stale, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _replace(tmp: str, final: str, aside: str) -> None:
    """Moves ``tmp`` to ``final``; an old ``final`` is renamed to ``aside`` first and deleted
    last, so at every moment one complete copy is found by :func:`candidates`."""
    if not os.path.exists(final):
        os.rename(tmp, final)
        return
    os.rename(final, aside)
    os.rename(tmp, final)
    shutil.rmtree(aside)


def _write_meta(path: str, meta: Mapping[str, Any]) -> None:
    with open(os.path.join(path, META), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)


def load_meta(path: str) -> dict[str, Any]:
    """``meta.json`` of checkpoint ``path``, its keys and types checked, its format one this
    jaxflow reads; raises :class:`CheckpointError` otherwise."""
    try:
        with open(os.path.join(path, META), encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError as e:
        raise fail(path, f"no {META}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise fail(path, f"{META} is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise fail(path, f"{META} is a JSON {_json_type(meta)}, not an object")
    version = meta.get("format_version")
    if type(version) is not int or version not in (UNSEALED_FORMAT, FORMAT_VERSION):
        raise fail(
            path,
            f"has checkpoint format {version!r}; this jaxflow reads formats {UNSEALED_FORMAT} and {FORMAT_VERSION}",
        )
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise fail(path, f"{META} lacks {missing}")
    wrong = [
        f"{k} is {_json_type(meta[k])}, not {_json_type(t())}" for k, t in META_KEYS.items() if type(meta[k]) is not t
    ]
    if wrong:
        raise fail(path, f"{META}: {'; '.join(wrong)}")
    return meta


def _json_type(value: Any) -> str:
    """The JSON name of a parsed JSON value's type."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def verify(path: str) -> dict[str, Any]:
    """Checks checkpoint ``path`` without unpickling or restoring anything and returns its meta:
    files against the manifest, ``meta.json``, the algorithm and its config, ``state/``, numpy
    files for object arrays, and replay files against the sizes ``meta.json`` records of them.
    Raises :class:`CheckpointError` (one line) otherwise."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise fail(path, "not a directory")
    meta = load_meta(path)
    try:
        if meta["format_version"] != UNSEALED_FORMAT:
            manifest.check_manifest(path)
        manifest.check_numpy_headers(path)
        if saved_replay.RECORD_KEY in meta:  # written since replay sizes are recorded
            saved_replay.check_record(path, meta[saved_replay.RECORD_KEY])
    except (manifest.ManifestError, saved_replay.ReplayFilesError) as e:
        raise fail(path, str(e)) from e
    if not os.path.isdir(os.path.join(path, "state")):
        raise fail(path, "no state/ directory")
    try:
        spec = get_algorithm(meta["algorithm"])
    except ConfigError as e:
        raise fail(path, f"{META}: {e}") from e
    try:
        config = from_json_dict(spec.config_cls, meta["config"])
    except (ConfigError, TypeError) as e:
        raise fail(path, f"{META}: its {spec.name} config does not parse: {e}") from e
    try:  # a file sets the env's documented options only, never how it shows itself
        if isinstance(getattr(config, "env", None), str):  # a program of its own may have no env
            envs.check_file_env_config(config.env, getattr(config, "env_config", {}), "its config")
    except envs.EnvOptionError as e:
        raise fail(path, f"{META}: {e}") from e
    except envs.UnknownEnvError:
        pass  # said when the run is built from it ("does not build")
    if meta["format_version"] == UNSEALED_FORMAT and path not in _WARNED_UNSEALED:  # once it loads, once a process
        _WARNED_UNSEALED.add(path)  # a command verifies a checkpoint more than once: one warning
        log.warning("checkpoint %s has format %d, without a manifest: its files are unverified", path, UNSEALED_FORMAT)
    return meta


def is_checkpoint(path: str) -> bool:
    """Whether ``path`` names one checkpoint (complete or not) rather than a directory of them:
    it holds a checkpoint's files, or is named like one and holds no checkpoints (Ray Tune's
    ``checkpoint_000007/``, which holds jaxflow's ``checkpoint_8/``, is a directory of them)."""
    if any(os.path.exists(os.path.join(path, f)) for f in (META, manifest.MANIFEST, "state")):
        return True
    return bool(_NAME.match(os.path.basename(os.path.abspath(path)))) and not candidates(path)


def candidates(directory: str) -> list[str]:
    """The checkpoints under ``directory``, newest first: ``checkpoint_<N>``, then any copy
    renamed aside while it was being replaced (:func:`save`); ``.tmp-*`` leftovers are ignored."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    found = [(int(m.group(1)), 1, n) for n in names if (m := _NAME.match(n))]
    found += [(int(m.group(1)), 0, n) for n in names if (m := _ASIDE.match(n))]
    return [os.path.join(directory, n) for *_, n in sorted(found, reverse=True)]


def remove_unfinished(directory: str) -> list[str]:
    """Removes the temporary folders of saves that never finished under ``directory`` (a killed
    process's ``.tmp-checkpoint_<N>-<id>``: only folders named as :func:`save` names them, nothing
    else) and returns their names. Call it only where no save is under way: a run starting or
    resuming in its logdir."""
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    paths = {n: os.path.join(directory, n) for n in names if _UNFINISHED.match(n)}
    removed = [n for n, p in paths.items() if os.path.isdir(p) and not os.path.islink(p)]  # a link is not save's
    for name in removed:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    return removed


def iteration_of(path: str) -> int:
    """The iteration of checkpoint ``path``: from its name, or its ``meta.json``."""
    m = _NAME.match(os.path.basename(path)) or _ASIDE.match(os.path.basename(path))
    return int(m.group(1)) if m else int(load_meta(path)["iteration"])


class Found(NamedTuple):
    path: str
    meta: dict[str, Any]
    skipped: list[tuple[str, str]]  # (checkpoint, why) of newer ones that did not verify


def search(path: str, check: Callable[[str, dict[str, Any]], Any] | None = None, warn: bool = True) -> Found:
    """The checkpoint ``path`` names, verified; or the newest checkpoint under ``path`` that
    verifies (and passes ``check(path, meta)``), each newer one it skipped logged as a warning
    (unless not ``warn``: a caller that says them itself, as the command line does, from
    :attr:`Found.skipped`). Raises :class:`CheckpointError` when there is none, with why each one failed.
    A ``best_checkpoint.json``, or a Tune experiment's folder holding one, names its checkpoint."""
    path = os.path.abspath(path)
    path = named_best(path) or path
    if is_checkpoint(path):
        return Found(path, _checked(path, check), [])
    skipped: list[tuple[str, str]] = []
    for ckpt in candidates(path):
        try:
            meta = _checked(ckpt, check)
        except CheckpointError as e:
            skipped.append((ckpt, str(e)))
            continue
        for _, why in skipped if warn else ():  # when none verifies, the error alone says why: one line
            log.warning("skipped %s", why)
        return Found(ckpt, meta, skipped)
    if not skipped:
        raise CheckpointError(f"No checkpoint under {path}.")
    raise CheckpointError(f"No checkpoint under {path} verifies: {'; '.join(why for _, why in skipped)}")


def _checked(path: str, check: Callable[[str, dict[str, Any]], Any] | None) -> dict[str, Any]:
    meta = verify(path)
    if check is not None:
        check(path, meta)
    return meta


def latest(directory: str) -> str | None:
    """The newest checkpoint at or under ``directory`` that verifies, or None where there is
    no checkpoint; :class:`CheckpointError` where there are some and none verifies."""
    directory = os.path.abspath(directory)
    if not is_checkpoint(directory) and not candidates(directory):
        return None
    return search(directory).path
