"""A checkpoint's arrays, ``state/`` (orbax): refused before a save where not finite, compared
with a template's tree, shapes and dtypes from orbax's metadata alone, restored into a template.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxflow.api.checkpoint import CheckpointError, fail

SHOWN_MISMATCHES = 3  # differing arrays named in a shape/dtype error


def check_finite(state: Any) -> None:
    """Raises :class:`CheckpointError` naming the first arrays of ``state`` that hold NaN or
    infinite values: a diverged run is not saved over its last good checkpoint.

    Example:
        >>> check_finite({"w": np.ones(2)})
        >>> try:
        ...     check_finite({"b": np.zeros(1), "w": np.array([1.0, np.nan])})
        ... except CheckpointError as e:
        ...     print(e)
        refusing to save a checkpoint with NaN or infinite values in 1 arrays (first: ['w']); the run diverged.
    """
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


def _arrays(tree: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    flat = ocp.tree.to_flat_dict(tree)
    return {
        "/".join(map(str, k)): (tuple(v.shape), np.dtype(v.dtype))
        for k, v in flat.items()
        if hasattr(v, "shape") and hasattr(v, "dtype")
    }


def check_shapes(path: str, template: Any) -> None:
    """Raises :class:`CheckpointError` unless the arrays orbax saved under ``path`` have the
    tree, shapes and dtypes of ``template``; reads orbax's metadata only."""
    try:
        with ocp.StandardCheckpointer() as ckptr:
            item = ckptr.metadata(os.path.join(path, "state")).item_metadata
    except Exception as e:  # orbax raises many kinds on a damaged directory: all mean "unreadable"
        raise fail(path, f"orbax cannot read the metadata of state/ ({type(e).__name__}: {e})") from e
    if item is None:  # orbax logs why and returns nothing
        raise fail(path, "orbax cannot read the metadata of state/ (state/_METADATA is missing or damaged)")
    saved = _arrays(item.tree)
    expected = _arrays(ocp.tree.serialize_tree(jax.device_get(template), keep_empty_nodes=True))
    diffs = [
        f"{k}: saved {_show(saved.get(k))}, expected {_show(expected.get(k))}"
        for k in sorted(set(saved) | set(expected))
        if saved.get(k) != expected.get(k)
    ]
    if diffs:
        more = f" (and {len(diffs) - SHOWN_MISMATCHES} more)" if len(diffs) > SHOWN_MISMATCHES else ""
        raise fail(path, f"state does not fit this config: {'; '.join(diffs[:SHOWN_MISMATCHES])}{more}")


def _show(entry: tuple[tuple[int, ...], np.dtype] | None) -> str:
    return "nothing" if entry is None else f"{entry[1]}{list(entry[0])}"


def restore_state(path: str, template: Any) -> Any:
    """Restores the saved state into the structure, shapes and dtypes of ``template``."""
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, jax.device_get(template))
    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(os.path.join(path, "state"), abstract)
