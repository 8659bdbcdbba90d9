"""On-policy fragments (IMPALA) need no ring but the same saving as replay rows:
:func:`encode_stacks` sends a fragment's frame stacks as each frame once, in shapes fixed by
``T``, ``B`` and ``k`` so that fragments still concatenate into train batches, with an index
the learner rebuilds the stacks from on its devices.
"""

from __future__ import annotations

import numpy as np

from jaxflow.replay.transitions import _INT16_MAX


def encode_stacks(obs: np.ndarray, last_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A fragment's stacked observations as each frame once, plus where each stack's frames are.

    Consecutive stacks within an episode share ``k - 1`` of their ``k`` frames, so sending
    whole stacks sends every frame ``k`` times. Here ``frames`` holds the first observation's
    ``k`` frames, then the newest frame of every later observation, and ``index`` says where
    each frame of each observation lies in it. The older frames of an observation ``t >= 1``
    must each be one of: the next frame of observation ``t - 1`` (a shift, every step inside
    an episode, including after a lost life), equal to its own newest frame (gymnasium's
    ``FrameStackObservation`` repeats the first frame of an episode), or all zeros (ale-py's
    vector environment zero-pads a new episode's stack). Equality is checked bit for bit.

    Args:
        obs: ``[T, B, k, *frame_shape]``, oldest frame first, ``k >= 2``.
        last_obs: ``[B, k, *frame_shape]``, the observation after the fragment's last step.

    Returns:
        ``(frames, index)``: ``frames`` ``[T + k, B, *frame_shape]`` in the observations'
        dtype; ``index`` int16 ``[T + 1, B, k]``, the position in ``frames`` of frame ``i``
        of observation ``t`` (``last_obs`` being ``t = T``), or -1 for an all-zero frame that
        ``frames`` does not hold. So ``obs[t, b, i] == frames[index[t, b, i], b]`` (zeros where
        the index is -1).

    Raises:
        ValueError: for shapes that do not fit together, ``k < 2``, a fragment too long for
            int16 positions, or an observation whose older frames are none of the three.
    """
    obs, last_obs = np.asarray(obs), np.asarray(last_obs)
    _check_stacks(obs, last_obs)
    num_steps, num_envs, k = obs.shape[:3]
    frames = np.empty((num_steps + k, num_envs) + obs.shape[3:], obs.dtype)
    frames[:k] = obs[0].swapaxes(0, 1)
    frames[k : num_steps + k - 1] = obs[1:, :, -1]
    frames[-1] = last_obs[:, -1]
    return frames, _stack_index(obs, last_obs)


def _check_stacks(obs: np.ndarray, last_obs: np.ndarray) -> None:
    """Raises :func:`encode_stacks`'s errors for shapes that do not fit together, ``k < 2``
    or a fragment too long for int16 positions."""
    if obs.ndim < 4 or obs.shape[2] < 2 or last_obs.shape != obs.shape[1:]:
        raise ValueError(
            f"encode_stacks needs obs [T, B, k, *frame_shape] with k >= 2 and last_obs [B, k, *frame_shape], "
            f"got obs {obs.shape} and last_obs {last_obs.shape}."
        )
    num_steps, _, k = obs.shape[:3]
    if num_steps + k > _INT16_MAX:
        raise ValueError(
            f"A fragment of T={num_steps} steps of {k} frames is too long for int16 positions; use shorter fragments."
        )


def _stack_index(obs: np.ndarray, last_obs: np.ndarray) -> np.ndarray:
    """:func:`encode_stacks`'s ``index`` ``[T + 1, B, k]``: an observation's newest frame is
    at ``k - 1 + t``; its older frames are its predecessor's shifted by one, except where
    :func:`_restarted_positions` finds the stack restarted."""
    num_steps, num_envs, k = obs.shape[:3]
    frame_axes = tuple(range(2, obs.ndim - 1))
    index = np.empty((num_steps + 1, num_envs, k), np.int16)
    index[0] = np.arange(k)
    index[:, :, -1] = (k - 1 + np.arange(num_steps + 1))[:, None]
    prev = obs[0]
    for t in range(1, num_steps + 1):
        cur = obs[t] if t < num_steps else last_obs
        index[t, :, :-1] = index[t - 1, :, 1:]
        envs, frame = np.nonzero(~np.all(cur[:, :-1] == prev[:, 1:], axis=frame_axes))
        if envs.size:
            index[t, envs, frame] = _restarted_positions(cur, envs, frame, t)
        prev = cur
    return index


def _restarted_positions(cur: np.ndarray, envs: np.ndarray, frame: np.ndarray, t: int) -> np.ndarray:
    """Positions of the older frames ``cur[envs, frame]`` of observation ``t`` that are not
    shifted from observation ``t - 1``: its newest frame's for a copy of it, -1 for all zeros.

    Raises:
        ValueError: if one of these frames is neither.
    """
    k = cur.shape[1]
    older = cur[envs, frame]
    repeat = np.all(older == cur[envs, -1], axis=tuple(range(1, older.ndim)))
    zero = ~np.any(older, axis=tuple(range(1, older.ndim)))
    if not np.all(repeat | zero):
        b, i = envs[~(repeat | zero)][0], frame[~(repeat | zero)][0]
        raise ValueError(
            f"Frame {i} of observation {t} of environment {b} is neither the next frame of the observation "
            "before it, nor a copy of its own newest frame, nor all zeros: these stacks cannot be sent as "
            "single frames (set send_frames_once=False to send whole observations)."
        )
    return np.where(repeat, k - 1 + t, -1)
