"""A run's storage at a URI (``--storage s3://bucket/run``): where its checkpoints,
``progress.jsonl``, ``config.json``, ``best_checkpoint.json`` and TensorBoard files end up,
on a filesystem that no node but the driver's needs to reach.

The run writes into its local logdir as always; after every checkpoint and at the end,
:meth:`Storage.push` mirrors that logdir's run files to the URI. Object stores have no
atomic rename, so a checkpoint stays all-or-nothing by order: its files go first, its
``manifest.json`` (every other file's size and SHA-256) last, and a copy that lacks its
manifest or does not match it fails :func:`~jaxflow.api.checkpoint.verify`, so a resume
from there falls back to the checkpoint before. A checkpoint the run no longer keeps
(retention) is removed there too. :meth:`Storage.pull` brings a run, or one checkpoint,
back into a local directory: ``--resume URI``, ``Algorithm.restore(URI)``, ``jaxflow
evaluate --checkpoint URI``.

Any filesystem fsspec opens (``memory://``, ``file://``, ``s3://`` with s3fs, ...), else
pyarrow's (``s3://``, ``gs://``, ``hdfs://``) through fsspec's ``ArrowFSWrapper``.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import uuid
from typing import Any

import fsspec

from jaxflow.api.logdir import (
    CHECKPOINT_META,
    CONFIG,
    claim_logdir,
    is_checkpoint_name,
    is_run_file,
    names_algorithm,
    run_files,
)
from jaxflow.api.manifest import MANIFEST
from jaxflow.config.fields import ConfigError

CACHE_ENV = "JAXFLOW_STORAGE_CACHE"
"""Where runs pulled from a URI go when no local directory is named (default ``~/.cache/jaxflow/storage``)."""
TRACKER_DIRS = ("wandb", "mlruns")
"""Run files that stay local: the trackers keep their own copies (a server, or their sync)."""


class StorageError(ConfigError):
    """A storage URI that cannot be opened or reached: one line naming it (CLI exit status 2)."""


def is_uri(path: str) -> bool:
    """True for ``scheme://...`` (a local path, relative or absolute, is not a URI)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum()


def _filesystem(uri: str) -> tuple[Any, str]:
    try:
        return fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as fsspec_error:
        try:
            import pyarrow.fs
            from fsspec.implementations.arrow import ArrowFSWrapper

            fs, root = pyarrow.fs.FileSystem.from_uri(uri)
            return ArrowFSWrapper(fs), root
        except Exception as arrow_error:
            raise StorageError(
                f"storage {uri!r} cannot be opened: fsspec says {_first_line(fsspec_error)}; "
                f"pyarrow.fs says {_first_line(arrow_error)}."
            ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


class Storage:
    """A run's files at ``uri``; checked (made and listed) when opened, so a URI that cannot
    be reached fails before anything starts.

    Example:
        >>> store = Storage("memory://doc/run")
        >>> store.list_run()
        []
    """

    def __init__(self, uri: str):
        self.uri = uri.rstrip("/")
        self.fs, self.root = _filesystem(self.uri)
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self.fs.ls(self.root, detail=False)
        except Exception as e:
            raise StorageError(f"storage {uri!r} cannot be reached or written: {_first_line(e)}.") from None

    def _path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def list_run(self) -> list[str]:
        """jaxflow's run files and checkpoints at the URI (names, sorted)."""
        names = [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.root, detail=False)]
        return sorted(n for n in names if is_run_file(n) and not n.startswith("."))

    def claim(self, overwrite: bool = False) -> None:
        """Makes the URI ready for a new run: one there is refused, or with ``overwrite`` removed."""
        found = self.list_run()
        shown = f"{', '.join(found[:3])}{', ...' if len(found) > 3 else ''}"
        if found and not overwrite:
            raise StorageError(
                f"storage {self.uri!r} already holds a run ({shown}): "
                f"continue it with --resume {self.uri}, pick a new URI, or replace it with --overwrite."
            )
        if found and not self._holds_jaxflow_run(found):  # files of that name, someone else's: never removed
            raise StorageError(
                f"storage {self.uri!r} holds files named like a run's ({shown}) but no jaxflow run (no config.json "
                "or checkpoint of jaxflow's); --overwrite replaces only a jaxflow run: pick a new URI."
            )
        for name in found:
            self.fs.rm(self._path(name), recursive=True)

    def _holds_jaxflow_run(self, found: list[str]) -> bool:
        """True where the run files ``found`` at the URI include jaxflow's ``config.json`` or a
        checkpoint's ``meta.json`` (:func:`~jaxflow.api.logdir.names_algorithm`)."""
        marks = [CONFIG] if CONFIG in found else []
        marks += [posixpath.join(n, CHECKPOINT_META) for n in found if is_checkpoint_name(n)]
        for mark in marks:
            try:
                if names_algorithm(json.loads(self.fs.cat_file(self._path(mark)))):
                    return True
            except Exception:  # missing or unreadable: not this one's mark
                continue
        return False

    def push(self, logdir: str) -> None:
        """Mirrors ``logdir``'s run files: new or changed checkpoints (manifest last), then
        progress, config and TensorBoard files; checkpoints gone from ``logdir`` are removed."""
        local = [n for n in run_files(logdir) if not n.startswith(".") and n not in TRACKER_DIRS]
        checkpoints = [n for n in local if os.path.isdir(os.path.join(logdir, n))]
        for name in checkpoints:
            self._push_checkpoint(os.path.join(logdir, name), name)
        for name in self.list_run():
            if is_checkpoint_name(name) and name not in checkpoints:
                self.fs.rm(self._path(name), recursive=True)
        for name in local:
            if name not in checkpoints:
                self._put_replacing(os.path.join(logdir, name), self._path(name))

    def _push_checkpoint(self, local: str, name: str) -> None:
        manifest = self._path(name, MANIFEST)
        with open(os.path.join(local, MANIFEST), "rb") as f:
            sealed = f.read()
        if self.fs.exists(manifest) and self.fs.cat_file(manifest) == sealed:
            return  # already there, complete
        if self.fs.exists(self._path(name)):  # an older write of this iteration: never half of each
            self.fs.rm(self._path(name), recursive=True)
        for directory, _, files in os.walk(local):
            rel = os.path.relpath(directory, local)
            target = self._path(name) if rel == "." else self._path(name, *rel.split(os.sep))
            self.fs.makedirs(target, exist_ok=True)
            for file in files:
                if rel != "." or file != MANIFEST:
                    self.fs.put_file(os.path.join(directory, file), posixpath.join(target, file))
        self.fs.pipe_file(manifest, sealed)  # last: the checkpoint is complete from here on

    def _put_replacing(self, local: str, remote: str) -> None:
        """Uploads under a temporary name and moves it into place, so a reader never sees half a file."""
        tmp = f"{remote}.tmp-{uuid.uuid4().hex[:8]}"
        self.fs.put_file(local, tmp)
        self.fs.mv(tmp, remote)

    def pull(self, local: str, name: str | None = None) -> str:
        """Copies the run (or its checkpoint ``name``) into ``local``, replacing jaxflow's run
        files there; returns the local path of what was pulled. ``local`` must be new, empty or
        a jaxflow run (:func:`~jaxflow.api.logdir.claim_logdir`): nothing else there is removed."""
        claim_logdir(local, overwrite=True)
        names = [name] if name else self.list_run()
        for item in names:
            source = self._path(item)
            if not self.fs.exists(source):
                raise StorageError(f"storage {self.uri!r} has no {item!r}.")
            if self.fs.isdir(source):
                for remote in self.fs.find(source):
                    rel = posixpath.relpath(remote, source)
                    target = os.path.join(local, item, *rel.split("/"))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    self.fs.get_file(remote, target)
            else:
                self.fs.get_file(source, os.path.join(local, item))
        return os.path.join(local, name) if name else local


def cache_dir(uri: str) -> str:
    """A local directory for what is pulled from ``uri`` when no other is named."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "jaxflow", "storage")
    tail = posixpath.basename(uri.rstrip("/")) or "run"
    return os.path.join(root, f"{tail}-{hashlib.sha1(uri.encode()).hexdigest()[:10]}")


def split_checkpoint(uri: str) -> tuple[str, str | None]:
    """``(run URI, checkpoint name or None)`` of a URI naming a run or one of its checkpoints."""
    head, tail = posixpath.split(uri.rstrip("/"))
    return (head, tail) if is_checkpoint_name(tail) and "://" in head else (uri.rstrip("/"), None)


def local_copy(path: str, local: str | None = None) -> str:
    """``path`` itself if local; a URI's run, or its checkpoint when it names one, pulled
    into ``local`` (default :func:`cache_dir`) otherwise. The local path is returned."""
    if not is_uri(path):
        return path
    run, name = split_checkpoint(path)
    return Storage(run).pull(local or cache_dir(run), name)
