"""Frame-deduplicated replay storage: each observation stored once, frame stacks as single frames.

A replay buffer that stores ``(obs, action, reward, discount, next_obs)`` tuples holds
every observation twice (once as ``obs``, once as the previous transition's
``next_obs``), and with Atari's stacks of ``k = 4`` frames each frame ``k`` times more:
eight copies of every 84x84 frame. DQN's replay memory (Mnih et al., 2015, "Human-level
control through deep reinforcement learning", Nature) and Dopamine's circular buffer
instead store each frame once, in time order, and rebuild the stacks when sampling.
This module does the same on top of :class:`~jaxflow.replay.PrioritizedReplayBuffer`,
whose ring slots become *rows*:

- A row holds one frame (the whole observation when ``frame_stack == 1``) in the
  observation's own dtype, so ``uint8`` frames stay ``uint8``.
- Every observation of a fragment *owns* one row, the one holding its newest frame. A
  row owned by an observation that starts a transition carries that transition's action,
  n-step reward and discount and gets the transition's (positive) priority; every other
  row is a context row of priority 0, which the buffer never samples.
- Relative pointers link the rows: ``next`` (forward) from a transition's row to the row
  owning its bootstrap observation, and ``stack`` (backward, ``frame_stack > 1`` only)
  from an owned row to the rows holding its observation's ``k`` frames.
- Rows per environment with ``frame_stack == 1``: ``T + 1``, one per observation;
  ``obs[t]`` owns row ``t`` of its environment's block, and the last (``obs[T]``, the
  bootstrap tail) is a context row.
- Rows per environment with ``frame_stack == k > 1``: ``obs[t]`` (``t >= 1``) that is a
  *shift* of ``obs[t - 1]`` (``obs[t][:-1] == obs[t - 1][1:]`` exactly) adds one row, its
  newest frame; any other observation (``obs[0]``, or one after a reset) adds one row per
  run of equal consecutive frames, so gymnasium's reset stack ``[f, f, f, f]`` costs one
  row and a stack of ``k`` distinct frames ``k`` rows. A fragment of ``T`` steps without
  resets thus takes at most ``T + k`` rows. Equality is compared bit for bit, so a reset
  that happens to look like a shift is stored as one, which is harmless: the frames
  rebuilt are the same.

Pointers never leave the block of rows that :func:`encode_fragment` makes for one
environment, so the block can be written at any ring position, wrapping around the end,
and :func:`decode_rows` resolves them modulo the capacity. When the ring overwrites its
oldest rows, a few surviving rows can lose the frames their stacks point back to;
:func:`rows_to_invalidate` names them, so the caller can set their priority to 0.

Everything here is plain numpy; the only Python loop runs over time steps, vectorised
over environments.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxflow.replay.checks import check_fragment, check_rows_to_decode

_INT16_MAX = int(np.iinfo(np.int16).max)


def encode_fragment(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    next_offsets: np.ndarray,
    priorities: np.ndarray,
    frame_stack: int = 1,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Packs a time-major fragment of transitions into ring rows, storing each frame once.

    The transition at ``(t, b)`` is ``obs[t, b] --actions[t, b]--> obs[t + next_offsets[t, b], b]``
    with return ``rewards[t, b]`` and bootstrap discount ``discounts[t, b]`` (n-step
    quantities computed by the caller; ``discounts`` is 0 where the episode ended). How many
    rows each environment takes is in the module docstring.

    Args:
        obs: ``[T + 1, B, *obs_shape]``: the fragment's ``T`` observations and the one after
            its last step. With ``frame_stack = k > 1``, ``obs_shape = (k, *frame_shape)``,
            oldest frame first (gymnasium's ``FrameStackObservation`` layout).
        actions: ``[T, B, ...]``, stored in its own dtype.
        rewards: ``[T, B]`` n-step returns.
        discounts: ``[T, B]`` bootstrap discounts (``gamma^n``, or 0 after a terminal).
        next_offsets: ``[T, B]`` integers in ``1..T - t``: the transition at ``t`` bootstraps
            from ``obs[t + next_offsets[t]]``.
        priorities: ``[T, B]`` finite and ``> 0``.
        frame_stack: frames per observation, ``k``.

    Returns:
        ``(rows, row_priorities)``. ``rows`` maps each field to an array with a common
        leading row axis ``R``, to be written into consecutive ring slots in this order;
        environment ``b``'s rows form one contiguous block after environment ``b - 1``'s.
        Fields: ``frame`` ``[R, *frame_shape]`` (obs dtype); ``next`` int16 ``[R]``, the
        forward offset from a transition's row to the row owning its bootstrap observation
        (0 on context rows); ``stack`` int16 ``[R, k]`` (only for ``k > 1``), back offsets
        from an owned row to the rows of its observation's frames, oldest first, the last
        always 0 (0 on rows nobody owns); ``actions``, ``rewards``, ``discounts`` (zeros on
        context rows). ``row_priorities`` is ``[R]``, ``priorities[t, b]`` on the row of
        transition ``(t, b)`` and 0 on context rows.

    Raises:
        ValueError: for shapes that do not match ``obs``, a ``frame_stack`` that does not
            match ``obs_shape[0]``, offsets outside ``1..T - t``, priorities that are not
            positive, or a fragment too long for int16 offsets.
    """
    obs = np.asarray(obs)
    actions, rewards, discounts = np.asarray(actions), np.asarray(rewards), np.asarray(discounts)
    next_offsets, priorities = np.asarray(next_offsets), np.asarray(priorities)
    check_fragment(obs, actions, rewards, discounts, next_offsets, priorities, frame_stack)
    # Frames as [T+1, B, k, *frame_shape]; with k == 1 the whole observation is the frame.
    frames = obs if frame_stack > 1 else obs[:, :, None]
    new, shift = _new_frames(frames)
    latest, num_rows = _number_rows(new)
    row_frames = np.empty((num_rows, *frames.shape[3:]), obs.dtype)
    row_frames[latest[new]] = frames[new]
    columns = {"actions": actions, "rewards": rewards, "discounts": discounts}
    frame_rows = _frame_rows(latest, shift)
    fields, row_priorities = _transition_fields(frame_rows, next_offsets, columns, priorities, num_rows)
    return {"frame": row_frames, **fields}, row_priorities


def _new_frames(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which frames of ``frames`` ``[T+1, B, k, *frame_shape]`` get rows of their own.

    Returns ``(new, shift)``: ``new[t, b, j]`` is true where frame ``j`` of ``obs[t]`` gets
    a row, ``shift[t, b]`` where ``obs[t]`` is a shift of ``obs[t - 1]`` (adding only its
    newest frame); otherwise a frame gets a row unless it repeats the one before it.
    """
    num_obs, num_envs, k = frames.shape[:3]
    frame_axes = tuple(range(3, frames.ndim))
    new = np.ones((num_obs, num_envs, k), bool)
    shift = np.zeros((num_obs, num_envs), bool)
    if k > 1:
        new[..., 1:] = ~np.all(frames[:, :, 1:] == frames[:, :, :-1], axis=frame_axes)
        shift[1:] = np.all(frames[1:, :, :-1] == frames[:-1, :, 1:], axis=(2,) + frame_axes)
        new[shift, :-1] = False
        new[shift, -1] = True
    return new, shift


def _number_rows(new: np.ndarray) -> tuple[np.ndarray, int]:
    """Numbers the rows of the new frames ``new`` ``[T+1, B, k]`` marks (see :func:`_new_frames`).

    Returns ``(latest, num_rows)``: ``latest[t, b, j]`` is the row of the latest new frame
    at or before frame ``j`` of ``obs[t]``, and ``num_rows`` how many rows there are.

    Raises:
        ValueError: if one environment needs more rows than int16 offsets can address.
    """
    num_obs, num_envs, k = new.shape
    # Rows are numbered env-major, then by time, then by frame: the index of the latest new
    # frame at or before (t, j) in that order is a cumulative sum over each env's block.
    new_by_env = new.transpose(1, 0, 2).reshape(num_envs, -1)
    latest = np.cumsum(new_by_env, axis=1) - 1
    rows_per_env = latest[:, -1] + 1
    base = np.concatenate(([0], np.cumsum(rows_per_env)[:-1]))
    latest = (latest + base[:, None]).reshape(num_envs, num_obs, k).transpose(1, 0, 2)
    if int(rows_per_env.max()) > _INT16_MAX:
        raise ValueError(
            f"A fragment of T={num_obs - 1} steps needs {int(rows_per_env.max())} rows for one environment, "
            f"more than int16 offsets can address ({_INT16_MAX}); use shorter fragments."
        )
    return latest, int(rows_per_env.sum())


def _frame_rows(latest: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``frame_rows[t, b, j]``: the row holding frame ``j`` of ``obs[t]``; the last, ``j = k - 1``,
    is the row ``obs[t]`` owns.

    Within an observation stored afresh, a repeated frame is the row of the latest new frame
    before it, which is ``latest`` itself (frame 0 is always new). A shift reuses its
    predecessor's rows.
    """
    frame_rows = latest.copy()
    for t in np.flatnonzero(shift.any(axis=1)):
        s = shift[t]
        frame_rows[t, s, :-1] = frame_rows[t - 1, s, 1:]
    return frame_rows


def _transition_fields(
    frame_rows: np.ndarray,
    next_offsets: np.ndarray,
    columns: Mapping[str, np.ndarray],
    priorities: np.ndarray,
    num_rows: int,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The rows' fields besides ``frame``, and their priorities, given ``frame_rows`` from
    :func:`_frame_rows`: the pointers ``next`` and (``k > 1`` only) ``stack``, then each of
    ``columns`` ``[T, B, ...]`` on the rows carrying the transitions, zeros elsewhere."""
    num_steps, num_envs, k = next_offsets.shape[0], frame_rows.shape[1], frame_rows.shape[2]
    owner = frame_rows[..., -1]  # [T+1, B]: the row each observation owns.
    starts = owner[:-1]  # [T, B]: rows carrying the transitions.
    targets = owner[np.arange(num_steps)[:, None] + next_offsets, np.arange(num_envs)[None, :]]
    row_next = np.zeros(num_rows, np.int16)
    row_next[starts] = targets - starts
    rows: dict[str, np.ndarray] = {"next": row_next}
    if k > 1:
        row_stack = np.zeros((num_rows, k), np.int16)
        row_stack[owner] = owner[..., None] - frame_rows
        rows["stack"] = row_stack
    for name, value in columns.items():
        column = np.zeros((num_rows, *value.shape[2:]), value.dtype)
        column[starts] = value
        rows[name] = column
    dtype = priorities.dtype if np.issubdtype(priorities.dtype, np.floating) else np.float64
    row_priorities = np.zeros(num_rows, dtype)
    row_priorities[starts] = priorities
    return rows, row_priorities


def decode_rows(storage: Mapping[str, np.ndarray], indices: np.ndarray, frame_stack: int) -> dict[str, np.ndarray]:
    """Rebuilds the transitions carried by ring rows, following their relative pointers.

    Args:
        storage: the ring's arrays ``{field: [capacity, ...]}`` holding rows written by
            :func:`encode_fragment` (``frame``, ``next``, ``stack`` when ``frame_stack > 1``,
            ``actions``, ``rewards``, ``discounts``).
        indices: ``[n]`` slots of rows that carry a transition (positive priority).
        frame_stack: the ``frame_stack`` the rows were encoded with.

    Returns:
        ``{"obs", "next_obs": [n, *obs_shape], "actions", "rewards", "discounts": [n, ...]}``,
        observations in the frames' dtype; ``obs_shape`` is ``(frame_stack, *frame_shape)``
        for ``frame_stack > 1`` and the frame's shape otherwise.

    Raises:
        ValueError: if ``frame_stack`` does not match the stored ``stack`` field, or
            ``indices`` is not a 1-D integer array of slots in ``[0, capacity)``.
    """
    idx = check_rows_to_decode(storage, indices, frame_stack)
    frames, stack = storage["frame"], storage.get("stack")
    capacity = frames.shape[0]

    def observations(owned: np.ndarray) -> np.ndarray:
        if frame_stack == 1:
            return frames[owned]
        assert stack is not None  # check_rows_to_decode rejected frame_stack > 1 without a 'stack' field
        return frames[(owned[:, None] - stack[owned].astype(np.int64)) % capacity]

    bootstrap = (idx + storage["next"][idx].astype(np.int64)) % capacity
    return {
        "obs": observations(idx),
        "next_obs": observations(bootstrap),
        "actions": storage["actions"][idx],
        "rewards": storage["rewards"][idx],
        "discounts": storage["discounts"][idx],
    }


def rows_to_invalidate(start: int, count: int, capacity: int, frame_stack: int) -> np.ndarray:
    """Slots whose rows can no longer be decoded after ``count`` rows were written at ``start``.

    Call it after writing a block into a full ring (one that overwrote its oldest rows) and
    set the returned slots' priorities to 0; they are ``(start + count + a) % capacity`` for
    ``a < frame_stack - 1``, leaving out slots inside the block just written.

    Why these ``k - 1 = frame_stack - 1`` rows suffice. Rows are overwritten oldest first,
    so the overwritten rows are a prefix of the ring in age order, and the slots just after
    the block hold the oldest survivors. A transition row ``r`` reads only rows within its
    own block, from ``r - stack[r][0]`` to ``r + next[r]``: back to its observation's oldest
    frame, at most ``k - 1`` rows back (the distinct frames of one observation occupy
    consecutive rows), and forward to the row owning its bootstrap observation, whose
    frames reach back no further than ``r``'s own (an observation's oldest frame row never
    decreases along a fragment). Rows forward of ``r`` in its block were written with it
    and lie later in age order, so they survive whenever ``r`` does: forward pointers are
    always overwritten before their targets. So ``r`` is broken only if a row up to
    ``k - 1`` before it was overwritten, that is, only if ``r`` is one of the first
    ``k - 1`` survivors. Rows that nothing reads (context rows) and
    ``frame_stack == 1`` (no back pointers) need nothing.

    ``count >= capacity``: the buffer then stores only the block's last ``capacity``
    rows, and the first ``k - 1`` of them point back to rows that were dropped, so their
    slots, again ``(start + count + a) % capacity``, are returned. Since a caller that
    passes the slots the buffer returned (``slots[0], len(slots)``) cannot tell a truncated
    block from one of exactly ``capacity`` rows, ``count == capacity`` is treated the same,
    which may drop up to ``k - 1`` decodable transitions but never keeps a broken one.
    Zeroing rows that already had priority 0 (context rows) is harmless; if the ring was not
    full, drop slots ``>= len(buffer)``, which hold no rows yet.
    """
    checks = (("start", start, 0), ("count", count, 0), ("capacity", capacity, 1), ("frame_stack", frame_stack, 1))
    for name, value, low in checks:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
    if start >= capacity:
        raise ValueError(f"start must be a slot in [0, {capacity}), got {start}.")
    outside = capacity - count if count < capacity else capacity
    num = min(frame_stack - 1, outside) if count > 0 else 0
    return (start + count + np.arange(num, dtype=np.int64)) % capacity
