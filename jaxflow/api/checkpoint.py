"""Checkpoints: learner state with orbax, config and counters as JSON, never pickled classes.

A checkpoint is a directory ``checkpoint_<iteration>/`` holding ``state/`` (orbax)
and ``meta.json`` (format version, algorithm, config, counters). It is written
under a temporary name and renamed when complete, so an interrupted write leaves
the previous checkpoint as the latest loadable one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

FORMAT_VERSION = 1


_NAME = re.compile(r"^checkpoint_(\d+)$")


class CheckpointError(RuntimeError):
    """No loadable checkpoint, or one written by an incompatible version."""


def check_finite(state: Any) -> None:
    """Raises :class:`CheckpointError` naming the first arrays of ``state`` that hold NaN or
    infinite values: a diverged run is not saved over its last good checkpoint."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    bad = [
        jax.tree_util.keystr(path)
        for path, x in leaves
        if np.issubdtype(np.asarray(x).dtype, np.floating) and not np.isfinite(np.asarray(x)).all()
    ]
    if bad:
        raise CheckpointError(
            f"refusing to save a checkpoint with NaN or infinite values in {len(bad)} arrays "
            f"(first: {', '.join(bad[:3])}); the run diverged."
        )


def save(
    directory: str, iteration: int, state: Any, meta: Mapping[str, Any], write_extra: Callable[[str], Any] | None = None
) -> str:
    """Writes ``state`` (a pytree of arrays) and ``meta`` atomically; returns the checkpoint path.

    ``write_extra(path)`` may add files (e.g. replay contents) to the checkpoint before
    it is renamed into place, so they are part of the same all-or-nothing write.
    """
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"checkpoint_{iteration:06d}")
    tmp = os.path.join(directory, f".tmp-checkpoint_{iteration:06d}-{uuid.uuid4().hex[:8]}")
    try:
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(os.path.join(tmp, "state"), jax.device_get(state))
        if write_extra is not None:
            write_extra(tmp)
        _write_meta(tmp, dict(meta, format_version=FORMAT_VERSION, iteration=iteration))
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_meta(path: str, meta: Mapping[str, Any]) -> None:
    with open(os.path.join(path, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)


def latest(directory: str) -> str | None:
    """The complete checkpoint with the highest iteration under ``directory`` (or ``directory``
    itself if it is one); temporary leftovers of interrupted writes are ignored."""
    directory = os.path.abspath(directory)
    if os.path.exists(os.path.join(directory, "meta.json")):
        return directory
    if not os.path.isdir(directory):
        return None
    found = [
        (int(m.group(1)), name)
        for name in os.listdir(directory)
        if (m := _NAME.match(name)) and os.path.exists(os.path.join(directory, name, "meta.json"))
    ]
    return os.path.join(directory, max(found)[1]) if found else None


def load_meta(path: str) -> dict[str, Any]:
    with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {meta.get('format_version')}; this jaxflow reads format {FORMAT_VERSION}."
        )
    return meta


def restore_state(path: str, template: Any) -> Any:
    """Restores the saved state into the structure, shapes and dtypes of ``template``."""
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, jax.device_get(template))
    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(os.path.join(path, "state"), abstract)
