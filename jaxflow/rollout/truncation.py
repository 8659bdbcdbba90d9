"""Time limits in a rollout's rewards: bootstrap a truncated episode, not a terminated one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def truncation_bootstrap(r_t: Any, terminated: Any, truncated: Any, gamma: float, v_final: Any) -> tuple[Any, Any]:
    """Rewards and discounts of steps whose episodes may have ended: the rule itself, on numpy
    or JAX arrays of one shape (or broadcasting ``v_final``).

    A truncated episode (a time limit, not a terminal state) gets ``gamma * v_final`` (the
    value of its final observation) added to its last reward, and every ended episode's
    discount is 0, so returns bootstrap from the value on a time limit but not on a real
    termination and learners need no extra field for it (Pardo et al., 2018, "Time Limits in
    Reinforcement Learning"). Host rollouts use it through :func:`bootstrap_truncations`;
    device mode (``jaxflow.ondevice.rollout``) calls it inside its compiled scan.

    For replay (DQN, SAC, TD3) ``v_final`` is the acting network's value when the step was
    sampled, and the replayed transition keeps it, where SB3 stores the final observation and
    bootstraps it from the target network at every replay: one transition per truncated
    episode learns from a value that ages with the buffer. It is not what makes the tuned
    DQN collapse late on CartPole: with the time limit moved out of reach, the run that had
    collapsed collapsed again (``benchmarks/README.md``, ``tuned_examples.py``).

    Example:
        >>> r, d = truncation_bootstrap(np.ones(3), np.array([True, False, False]),
        ...                             np.array([False, True, False]), 0.5, np.full(3, 4.0))
        >>> r.tolist(), d.tolist()
        ([1.0, 3.0, 1.0], [0.0, 0.0, 0.5])
    """
    cut = truncated & ~terminated
    return r_t + gamma * cut * v_final, gamma * ~(terminated | truncated)


def bootstrap_truncations(
    r_t: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    final_value: Callable[[], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`truncation_bootstrap` for one step of B environments on the host, where the
    values ``final_value()`` of the final observations cost a forward pass: asked for only
    when some episode was truncated.

    Example:
        >>> r, d = bootstrap_truncations(np.ones(3), np.array([True, False, False]),
        ...                              np.array([False, True, False]), 0.5, lambda: np.full(3, 4.0))
        >>> r.tolist(), d.tolist()
        ([1.0, 3.0, 1.0], [0.0, 0.0, 0.5])
    """
    v_final = final_value() if (truncated & ~terminated).any() else 0.0
    return truncation_bootstrap(r_t, terminated, truncated, gamma, v_final)
