"""Divergence guards of a rollout worker: a NaN or infinite value from an environment or from
the policy's network stops the worker on the step that made it, naming what gave it."""

from __future__ import annotations

import numpy as np


class PolicyOutputError(FloatingPointError):
    """The policy's network gave a NaN or infinite output: the worker stops on that step
    rather than act on it (an action from NaN logits is arbitrary, a NaN action reaches the env)."""


class EnvValueError(FloatingPointError):
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
    inputs: np.ndarray, values: np.ndarray, worker: int, model: str, env_id: str, env_step: int
) -> str:
    """What a :class:`PolicyOutputError` says: the worker, the model, how many observations, where."""
    bad = int((~np.isfinite(inputs)).any(axis=-1).sum() + (~np.isfinite(values)).sum())
    return (
        f"rollout worker {worker}: the policy ({model}) gave NaN or infinite outputs for {bad} of "
        f"{len(inputs)} observations of {env_id!r} at the worker's env step {env_step}; "
        "its parameters or the observations are not finite."
    )
