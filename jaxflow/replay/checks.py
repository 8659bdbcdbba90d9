"""Argument checks for replay storage, apart from the data structures they guard.

Each check raises ``ValueError`` naming the offending argument and, for arrays, how many
entries are wrong and the first of them, so that a bad fragment or batch is rejected before
anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def check_priorities(priorities: Any, n: int) -> np.ndarray:
    """``priorities`` as float64 ``[n]``, after checking that they are finite and ``>= 0``."""
    p = np.asarray(priorities, np.float64)
    if p.shape != (n,):
        raise ValueError(f"Expected {n} priorities (shape ({n},)), got shape {p.shape}.")
    bad = np.flatnonzero(~(np.isfinite(p) & (p >= 0)))
    if bad.size:
        raise ValueError(
            f"Priorities must be finite and >= 0, but {bad.size} of {n} are not "
            f"(first at position {bad[0]}: {p[bad[0]]})."
        )
    return p


def check_batch(batch: Mapping[str, np.ndarray], storage: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``batch`` as numpy arrays, after checking that its fields share a leading size and, once
    ``storage`` holds arrays, that they have its fields, item shapes and storable dtypes."""
    if not batch:
        raise ValueError("A batch needs at least one field.")
    arrays = {k: np.asarray(v) for k, v in batch.items()}
    scalars = [k for k, v in arrays.items() if v.ndim == 0]
    if scalars:
        raise ValueError(f"Fields {scalars} have no leading batch axis.")
    sizes = {k: v.shape[0] for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"Fields have different leading sizes: {sizes}.")
    if not storage:
        return arrays
    if arrays.keys() != storage.keys():
        missing = sorted(storage.keys() - arrays.keys())
        extra = sorted(arrays.keys() - storage.keys())
        raise ValueError(f"Batch fields differ from the stored ones: missing {missing}, unexpected {extra}.")
    for k, v in arrays.items():
        stored = storage[k]
        if v.shape[1:] != stored.shape[1:]:
            raise ValueError(f"Field {k!r} has item shape {v.shape[1:]}, but stored items have {stored.shape[1:]}.")
        # Same-kind only: a float batch written into an integer field would be silently truncated.
        if not np.can_cast(v.dtype, stored.dtype, casting="same_kind"):
            raise ValueError(f"Field {k!r} has dtype {v.dtype}, which cannot be stored as {stored.dtype}.")
    return arrays


def check_frame_stack(frame_stack: int) -> None:
    """Rejects a ``frame_stack`` that is not a positive integer (``True`` included)."""
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, (int, np.integer)) or frame_stack < 1:
        raise ValueError(f"frame_stack must be a positive integer, got {frame_stack!r}.")


def check_fragment(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    next_offsets: np.ndarray,
    priorities: np.ndarray,
    frame_stack: int,
) -> None:
    """Validates ``jaxflow.replay.transitions.encode_fragment``'s arguments."""
    check_frame_stack(frame_stack)
    if obs.ndim < 2 or obs.shape[0] < 2:
        raise ValueError(
            f"obs must be [T+1, B, *obs_shape] with T >= 1 (the fragment's observations plus the one "
            f"after its last step), got shape {obs.shape}."
        )
    num_steps, num_envs = obs.shape[0] - 1, obs.shape[1]
    if frame_stack > 1 and (obs.ndim < 3 or obs.shape[2] != frame_stack):
        raise ValueError(
            f"frame_stack={frame_stack} needs obs of shape [T+1, B, {frame_stack}, *frame_shape] "
            f"(frames stacked on the leading observation axis), got obs shape {obs.shape}."
        )
    expected = (num_steps, num_envs)
    if actions.shape[:2] != expected:
        raise ValueError(f"actions must have leading shape [T, B] = {expected} (from obs), got {actions.shape}.")
    for name, value in (
        ("rewards", rewards),
        ("discounts", discounts),
        ("next_offsets", next_offsets),
        ("priorities", priorities),
    ):
        if value.shape != expected:
            raise ValueError(f"{name} must have shape [T, B] = {expected} (from obs), got {value.shape}.")
    if not np.issubdtype(next_offsets.dtype, np.integer):
        raise ValueError(f"next_offsets must be integers, got dtype {next_offsets.dtype}.")
    limit = num_steps - np.arange(num_steps)[:, None]
    bad = np.argwhere((next_offsets < 1) | (next_offsets > limit))
    if bad.size:
        t, b = bad[0]
        raise ValueError(
            f"next_offsets must be in 1..T-t so that obs[t + next_offsets[t]] exists (T={num_steps}), but "
            f"{len(bad)} are not (first at t={t}, b={b}: {next_offsets[t, b]})."
        )
    bad = np.argwhere(~(np.isfinite(priorities) & (priorities > 0)))
    if bad.size:
        t, b = bad[0]
        raise ValueError(
            f"priorities must be finite and > 0 (0 marks context rows), but {len(bad)} are not "
            f"(first at t={t}, b={b}: {priorities[t, b]})."
        )


def check_rows_to_decode(storage: Mapping[str, np.ndarray], indices: np.ndarray, frame_stack: int) -> np.ndarray:
    """Validates ``jaxflow.replay.transitions.decode_rows``'s arguments; returns ``indices`` as int64."""
    check_frame_stack(frame_stack)
    capacity = storage["frame"].shape[0]
    stack = storage.get("stack")
    if frame_stack > 1 and (stack is None or stack.shape[1:] != (frame_stack,)):
        found = "no 'stack' field" if stack is None else f"'stack' of shape {stack.shape}"
        raise ValueError(
            f"frame_stack={frame_stack} needs a 'stack' field of shape [capacity, {frame_stack}], got {found}."
        )
    if frame_stack == 1 and stack is not None:
        raise ValueError(f"Rows hold {stack.shape[1]}-frame stacks, but frame_stack=1 was given.")
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError(f"indices must be a 1-D integer array, got {idx.dtype} with shape {idx.shape}.")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= capacity):
        raise ValueError(f"indices must be slots in [0, {capacity}), got values in [{idx.min()}, {idx.max()}].")
    return idx
