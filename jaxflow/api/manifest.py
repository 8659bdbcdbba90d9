"""A checkpoint's manifest (every file's size and SHA-256) and the checks that read a
checkpoint without trusting it: the manifest against the files, and the headers of numpy
files for object arrays, which only a pickle can load.

Both raise ``ValueError`` subclasses with one line; :mod:`jaxflow.api.checkpoint` names the
checkpoint in front of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from typing import IO, Any

import numpy as np

MANIFEST = "manifest.json"
_CHUNK = 1 << 20  # bytes hashed at a time: large replay files are never read whole
_NUMPY_SUFFIXES = (".npy", ".npz")


class ManifestError(ValueError):
    """A checkpoint's files differ from its manifest, or a file could only be read by unpickling."""


def files_under(path: str) -> list[str]:
    """Relative paths (with ``/``) of every file under ``path``, the manifest excluded, sorted."""
    out = []
    for root, _, names in os.walk(path):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/")
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(path: str) -> None:
    """Writes ``manifest.json`` listing every other file under ``path``; written last, so a
    checkpoint with a manifest was complete when it was sealed."""
    files = {}
    for rel in files_under(path):
        full = os.path.join(path, rel)
        files[rel] = {"size": os.path.getsize(full), "sha256": sha256(full)}
    with open(os.path.join(path, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"files": files}, f, indent=1)


def _read_manifest(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as e:
        raise ManifestError(f"no {MANIFEST}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{MANIFEST} is not valid JSON ({e})") from e
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(_is_entry(v) for v in files.values()):
        raise ManifestError(f'{MANIFEST} is not an object {{"files": {{path: {{"size": int, "sha256": str}}}}}}')
    return files


def _is_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and type(entry.get("size")) is int
        and isinstance(entry.get("sha256"), str)
        and set(entry) == {"size", "sha256"}
    )


def check_manifest(path: str) -> None:
    """Raises :class:`ManifestError` naming the first file missing, unexpected, resized or
    changed (by SHA-256) against ``manifest.json``."""
    files = _read_manifest(path)
    present = files_under(path)
    missing = sorted(set(files) - set(present))
    extra = sorted(set(present) - set(files))
    if missing:
        raise ManifestError(
            f"missing file {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    if extra:
        raise ManifestError(f"unexpected file {extra[0]}" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for rel, entry in sorted(files.items()):
        full = os.path.join(path, rel)
        size = os.path.getsize(full)
        if size != entry["size"]:
            raise ManifestError(f"{rel} has {size} bytes, the manifest says {entry['size']}")
        if sha256(full) != entry["sha256"]:
            raise ManifestError(f"{rel} does not match its SHA-256 in the manifest (changed after it was written)")


def _npy_dtype(f: IO[bytes]) -> np.dtype:
    """The dtype in an ``.npy`` header, read without loading (or unpickling) the array."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)[2]
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(f)[2]
    raise ValueError(f"npy format version {version}")


def check_numpy_headers(path: str) -> None:
    """Raises :class:`ManifestError` for a ``.npy`` or ``.npz`` file under ``path`` that holds
    an object array (a pickle: loading it could run code) or whose header does not parse."""
    for rel in files_under(path):
        if not rel.endswith(_NUMPY_SUFFIXES):
            continue
        full = os.path.join(path, rel)
        try:
            if rel.endswith(".npy"):
                with open(full, "rb") as f:
                    arrays = [(rel, _npy_dtype(f))]
            else:
                with zipfile.ZipFile(full) as z:
                    arrays = []
                    for member in z.namelist():
                        with z.open(member) as f:
                            arrays.append((f"{rel}:{member}", _npy_dtype(f)))
        except (ValueError, OSError, zipfile.BadZipFile, SyntaxError) as e:
            raise ManifestError(f"{rel} is not a readable numpy file ({e})") from e
        for name, dtype in arrays:
            if dtype.hasobject:
                raise ManifestError(f"{name} holds an object array ({dtype}), which only unpickling can read")
