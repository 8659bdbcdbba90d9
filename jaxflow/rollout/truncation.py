"""Time limits in a rollout's rewards: bootstrap a truncated episode, not a terminated one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def bootstrap_truncations(
    r_t: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    final_value: Callable[[], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Rewards and discounts ``[B]`` of one step of B environments, on the host.

    A truncated episode (a time limit, not a terminal state) gets ``gamma * V(final_obs)``
    added to its last reward, and every ended episode's discount is 0, so returns bootstrap
    from the value on a time limit but not on a real termination and learners need no extra
    field for it (Pardo et al., 2018, "Time Limits in Reinforcement Learning"). The values
    ``final_value()`` of the final observations are asked for only when some episode was
    truncated. Device mode does the same on the device (``jaxflow.ondevice.rollout``).

    Example:
        >>> r, d = bootstrap_truncations(np.ones(3), np.array([True, False, False]),
        ...                              np.array([False, True, False]), 0.5, lambda: np.full(3, 4.0))
        >>> r.tolist(), d.tolist()
        ([1.0, 3.0, 1.0], [0.0, 0.0, 0.5])
    """
    cut = truncated & ~terminated
    if cut.any():
        r_t = r_t + gamma * cut * final_value()
    return r_t, gamma * ~(terminated | truncated)
