"""Divergence guards of a rollout worker: a NaN or infinite value from an environment or from
the policy's network stops the worker on the step that made it, naming what gave it."""

from __future__ import annotations

import numpy as np


class DivergenceError(FloatingPointError):
    """A divergence guard stopped the run: a NaN or infinite value that training cannot go on
    with. Its message names where (env, worker or learner, step) and the setting, if any, that
    lets such values through; ``jaxflow train`` reports it in one line (:mod:`jaxflow.api.failures`)."""


class PolicyOutputError(DivergenceError):
    """The policy's network gave a NaN or infinite output: the worker stops on that step
    rather than act on it (an action from NaN logits is arbitrary, a NaN action reaches the env)."""


class EnvValueError(DivergenceError):
    """An environment gave a NaN or infinite observation or reward."""


def check_finite_step(obs: np.ndarray, reward: np.ndarray, env_id: str, worker: int, env_step: int) -> None:
    """Raises :class:`EnvValueError` naming the env, the worker, the field and the step where a
    vector step's observations (floating point ones) or rewards are NaN or infinite."""
    for field, x in (("observation", obs), ("reward", reward)):
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            envs_hit = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
            raise EnvValueError(
                f"rollout worker {worker}: env {env_id!r} returned a NaN or infinite {field} at the worker's env step "
                f"{env_step} (envs {envs_hit.tolist()} of its vector); check_finite=false lets such values through."
            )


def bad_output_message(
    inputs: np.ndarray, values: np.ndarray, worker: int, model: str, env_id: str, env_step: int, check_finite: bool
) -> str:
    """What a :class:`PolicyOutputError` says: the worker, the model, how many observations (each
    counted once, whether its distribution inputs, its value or both are not finite), where, and
    whether ``check_finite=false`` let non-finite observations reach the policy.

    Example:
        >>> inputs, values = np.full((16, 2), np.nan), np.full(16, np.nan)
        >>> bad_output_message(inputs, values, 0, "the default network", "CartPole-v1", 48, True)[:95]
        'rollout worker 0: the policy (the default network) gave NaN or infinite outputs for 16 of 16 ob'
    """
    rows = len(inputs)
    finite = np.isfinite(inputs.reshape(rows, -1)).all(axis=1) & np.isfinite(values.reshape(rows, -1)).all(axis=1)
    bad = int((~finite).sum())
    why = "its parameters or the observations are not finite"
    if not check_finite:
        why += " (check_finite=false lets NaN or infinite observations reach the policy)"
    return (
        f"rollout worker {worker}: the policy ({model}) gave NaN or infinite outputs for {bad} of "
        f"{rows} observations of {env_id!r} at the worker's env step {env_step}; {why}; no setting lets "
        "such outputs reach the env."
    )
