"""Replay shards' files in a checkpoint: ``replay_shard_<i>.npz`` as
:meth:`~jaxflow.replay.shard.ReplayShard.export_state` wrote it, what ``meta.json`` records of
them (each shard's size and capacity, under :data:`RECORD_KEY`), and the checks that read the
files back against that record, or against the run about to load them, without unpickling
anything and before any shard takes them.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from typing import Any

import numpy as np

from jaxflow.config.fields import ConfigError

RECORD_KEY = "replay_shards"
"""``meta.json``'s key for the shards' record: ``[{"size": int, "capacity": int}, ...]`` in shard
order, or ``{"replay_<policy>": [...], ...}`` for a multi-agent run's replay of each policy."""
_FILE = re.compile(r"^replay_shard_(\d+)\.npz$")
_SUBDIR = re.compile(r"^replay_[\w.-]+$")


class ReplayFilesError(ConfigError):
    """Replay files that differ from their checkpoint's record, or that this run's shards
    cannot hold: one line (a ``ConfigError``, so the CLI exits with status 2)."""


def shard_path(directory: str, index: int) -> str:
    return os.path.join(directory, f"replay_shard_{index}.npz")


def write_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file renamed when complete."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def summary(source: bytes | str) -> dict[str, int]:
    """``{"size", "capacity"}`` of a shard's export: its bytes, or the path of its file.
    Reads the ``__meta__`` member only (``allow_pickle=False``); raises :class:`ReplayFilesError`
    for a file that is no such export."""
    name = source if isinstance(source, str) else "replay bytes"
    try:
        with np.load(io.BytesIO(source) if isinstance(source, bytes) else source, allow_pickle=False) as f:
            buffer = json.loads(f["__meta__"].tobytes().decode())["buffer"]
        out = {"size": buffer["size"], "capacity": buffer["capacity"]}
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as e:  # json's errors are ValueErrors
        raise ReplayFilesError(f"{os.path.basename(name)} is not a replay shard's contents ({e!r})") from e
    if not all(type(v) is int for v in out.values()):
        raise ReplayFilesError(f"{os.path.basename(name)}: its size and capacity are not integers ({out})")
    return out


def check_record(directory: str, record: Any, where: str = "") -> None:
    """Raises :class:`ReplayFilesError` unless the replay files in checkpoint ``directory``
    are exactly the shards ``record`` (:data:`RECORD_KEY`'s value) lists, each of its size and
    capacity. A record that is an object holds one such list per sub-directory (a multi-agent
    run's ``replay_<policy>/``)."""
    if isinstance(record, dict):
        for sub, inner in record.items():
            if not (_SUBDIR.match(sub) and os.path.isdir(os.path.join(directory, sub))):
                raise ReplayFilesError(f"{RECORD_KEY} names {sub!r}, which is no replay_<policy> directory here")
            check_record(os.path.join(directory, sub), inner, f"{where}{sub}/")
        return
    if not isinstance(record, list) or not all(
        isinstance(r, dict) and set(r) == {"size", "capacity"} and all(type(v) is int for v in r.values())
        for r in record
    ):
        raise ReplayFilesError(f'{RECORD_KEY} is not a list of {{"size": int, "capacity": int}}')
    present = sorted(int(m.group(1)) for n in os.listdir(directory) if (m := _FILE.match(n)))
    if present != list(range(len(record))):
        raise ReplayFilesError(
            f"{RECORD_KEY} lists {len(record)} shards, the files are for shards {present} ({where}replay_shard_<i>.npz)"
        )
    for i, recorded in enumerate(record):
        found = summary(shard_path(directory, i))
        if found != recorded:
            raise ReplayFilesError(
                f"{where}replay_shard_{i}.npz holds {found['size']} items of capacity {found['capacity']}, "
                f"{RECORD_KEY} says {recorded['size']} of {recorded['capacity']}"
            )


def check_fits(directory: str, num_shards: int, capacity: int) -> None:
    """Raises :class:`ReplayFilesError` unless checkpoint ``directory`` holds the files of
    ``num_shards`` shards of ``capacity`` each (what the run about to load them has)."""
    paths = [shard_path(directory, i) for i in range(num_shards)]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise ReplayFilesError(
            f"No replay contents for {len(missing)} of {num_shards} shards: {missing[0]} "
            "(the run's number of replay shards must be the checkpoint's)"
        )
    extra = shard_path(directory, num_shards)
    if os.path.exists(extra):
        raise ReplayFilesError(
            f"{directory} holds more replay shards than this run's {num_shards} ({os.path.basename(extra)}); "
            "the run's number of replay shards must be the checkpoint's"
        )
    for path in paths:
        saved = summary(path)["capacity"]
        if saved != capacity:
            raise ReplayFilesError(
                f"{path} is a shard of capacity {saved}, this run's shards hold {capacity} "
                "(the run's replay capacity and number of shards must be the checkpoint's)"
            )
