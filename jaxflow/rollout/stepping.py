"""What a rollout worker steps with: its vector environments, the empty arrays of a fragment
it fills step by step, and a stopwatch for its time in the envs and the policy."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from jaxflow import envs


class Stopwatch:
    """Adds up the seconds spent inside ``with`` blocks: a worker's time in its envs and in
    waits for the policy, for :class:`SampleTiming`.

    Example:
        >>> env_watch = Stopwatch()
        >>> with env_watch:
        ...     step = env.step(actions)  # doctest: +SKIP
        >>> env_watch.seconds  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds += time.perf_counter() - self._start


def make_vector_envs(
    config: Any, seed: int, index: int = 0, incarnation: int = 0, num_groups: int | None = None
) -> list[Any]:
    """The vectors of environments a rollout worker of ``config`` steps: ``num_groups``
    (default ``config.rollout.num_env_groups``) groups splitting ``num_envs_per_worker`` envs, whose
    env ``i`` is seeded ``seed + i`` however they are grouped. ``vector_env="ale"`` runs
    ale-py's emulators in ``num_cpus_per_worker`` threads (at least one) per group; anything
    else steps gymnasium envs in the worker's own thread."""
    groups = config.rollout.num_env_groups if num_groups is None else num_groups
    n = config.rollout.num_envs_per_worker // groups
    if config.rollout.vector_env == "ale":
        threads = max(1, int(config.rollout.num_cpus_per_worker))
        return [
            envs.ALEVectorEnv(config.env, n, seed + g * n, config.env_config, index, incarnation, threads)
            for g in range(groups)
        ]
    return [envs.VectorEnv(config.env, n, seed + g * n, config.env_config, index, incarnation) for g in range(groups)]


def empty_fragment(T: int, B: int, obs: np.ndarray, dist: Any, num_inputs: int) -> dict[str, np.ndarray]:
    """The per-step fields of a ``[T, B]`` fragment, to be filled step by step: observations
    like ``obs`` (``[B, ...]``), the distribution's actions and ``num_inputs`` inputs, and
    float32 log-probabilities, values, rewards and discounts."""
    return dict(  # in the order of the fields every fragment has had
        obs=np.empty((T, B) + obs.shape[1:], obs.dtype),
        actions=np.empty((T, B, *dist.action_shape), dist.action_dtype),
        logp=np.empty((T, B), np.float32),
        dist_inputs=np.empty((T, B, num_inputs), np.float32),
        values=np.empty((T, B), np.float32),
        rewards=np.empty((T, B), np.float32),
        discounts=np.empty((T, B), np.float32),
    )
