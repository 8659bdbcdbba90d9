"""Device mode's divergence guard on environment values: a compiled call reports the first
step whose observation or reward was NaN or infinite, and the host stops the run there,
naming the env, the member, the field and the step, as a Ray rollout worker does
(:func:`~jaxflow.rollout.guards.check_finite_step`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxflow.ondevice.rollout import NONFINITE_OBSERVATION, NONFINITE_REWARD
from jaxflow.rollout.guards import EnvValueError

ENV_NONFINITE_FIELDS = ("env_nonfinite_at", "env_nonfinite_bits")
"""A call's per-iteration ``[members, K]`` reports of :func:`~jaxflow.ondevice.rollout.first_nonfinite`."""


def check_env_values(
    out: Mapping[str, np.ndarray], env_id: str, num_envs: int, steps_per_iteration: int, iterations_done: int
) -> None:
    """Raises :class:`EnvValueError` at the first iteration of a call's host metrics ``out``
    (``[members, K, ...]``, ``iterations_done`` counted after the call) in which an env gave a
    NaN or infinite observation or reward: that member's env step, counted as Ray mode's
    ``env_steps_sampled`` is (each iteration ``steps_per_iteration``, one step of every env at a time).

    Example:
        >>> out = {"env_nonfinite_at": np.array([[-1, 9]]), "env_nonfinite_bits": np.array([[0, 2]])}
        >>> check_env_values(out, "test/Env-v0", num_envs=4, steps_per_iteration=32, iterations_done=2)
        Traceback (most recent call last):
        ...
        jaxflow.rollout.guards.EnvValueError: device mode, member 0: env 'test/Env-v0' returned a NaN or infinite reward at env step 41 (env 1 of 4, step 2 of iteration 2); check_finite=false lets such values through.
    """
    at = np.asarray(out["env_nonfinite_at"])
    if not (at >= 0).any():
        return
    members, iterations = np.nonzero(at >= 0)
    k = int(iterations.min())  # members train in lockstep: the earliest iteration, then the first member
    member = int(members[iterations == k].min())
    index, bits = int(at[member, k]), int(out["env_nonfinite_bits"][member, k])
    iteration = iterations_done - at.shape[1] + k
    t, env = divmod(index, num_envs)
    field = " and ".join(
        name for bit, name in ((NONFINITE_OBSERVATION, "observation"), (NONFINITE_REWARD, "reward")) if bits & bit
    )
    raise EnvValueError(
        f"device mode, member {member}: env {env_id!r} returned a NaN or infinite {field} at env step "
        f"{iteration * steps_per_iteration + index} (env {env} of {num_envs}, step {t} of iteration {iteration + 1}); "
        "check_finite=false lets such values through."
    )
