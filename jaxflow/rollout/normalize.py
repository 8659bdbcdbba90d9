"""Running observation normalization and reward scaling, for host workers (numpy) and device
mode (jax) alike: the same arithmetic on either kind of array.

Observations become ``clip((obs - mean) / std, -clip, clip)`` with the running mean and
variance of every observation seen; rewards are divided by the running standard deviation of
each environment's discounted return and clipped (Engstrom et al., 2020, "Implementation
Matters in Deep Policy Gradients"; Stable-Baselines' ``VecNormalize``). Statistics are
merged with Chan et al.'s (1979) parallel update, so each worker's statistics since the last
sync merge into the driver's exactly, in any order.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from jaxflow.config.fields import require

VARIANCE_EPS = 1e-8
"""Added to a variance before its square root: a constant feature is centred, not divided by 0."""


class Moments(NamedTuple):
    """Count, mean and sum of squared deviations of the samples seen (float64 on the host)."""

    count: Any
    mean: Any
    m2: Any


def moments_init(shape: tuple[int, ...], xp: Any = np) -> Moments:
    """No samples yet, for samples of ``shape`` (``xp``: numpy or jax.numpy)."""
    dtype = np.float64 if xp is np else np.float32
    return Moments(xp.zeros((), dtype), xp.zeros(shape, dtype), xp.zeros(shape, dtype))


def moments_merge(a: Moments, b: Moments) -> Moments:
    """The moments of both sets of samples (Chan, Golub and LeVeque's pairwise update).

    Example:
        >>> x = np.arange(5.0)
        >>> m = moments_merge(moments_of(x[:2]), moments_of(x[2:]))
        >>> float(m.count), float(m.mean), float(m.m2 / m.count)
        (5.0, 2.0, 2.0)
    """
    count = a.count + b.count
    safe = count + (count == 0)  # two empty sets merge to an empty set, not a NaN mean
    delta = b.mean - a.mean
    mean = a.mean + delta * (b.count / safe)
    m2 = a.m2 + b.m2 + delta**2 * (a.count * b.count / safe)
    return Moments(count, mean, m2)


def moments_of(x: Any) -> Moments:
    """The moments of the samples along ``x``'s first axis."""
    mean = x.mean(axis=0)
    return Moments(x.shape[0] + 0 * mean.sum(), mean, ((x - mean) ** 2).sum(axis=0))


def moments_std(m: Moments) -> Any:
    """The standard deviation (``VARIANCE_EPS`` added to the variance); 1 before any sample."""
    variance = m.m2 / (m.count + (m.count == 0)) + (m.count == 0)
    return (variance + VARIANCE_EPS) ** 0.5


def normalize_observations(m: Moments, obs: Any, clip: float) -> Any:
    """``clip((obs - mean) / std, -clip, clip)`` in the dtype of ``obs``."""
    return ((obs - m.mean) / moments_std(m)).clip(-clip, clip).astype(obs.dtype)


class Normalizer(NamedTuple):
    """What a run normalizes with: observation moments, and the moments of the discounted
    return rewards are scaled by (either None when off)."""

    obs: Moments | None
    ret: Moments | None


def normalizer_init(config: Any, obs_shape: tuple[int, ...], xp: Any = np) -> Normalizer | None:
    """The empty statistics ``config.rollout`` asks for, or None when it normalizes nothing."""
    r = config.rollout
    if not (r.normalize_observations or r.scale_rewards):
        return None
    return Normalizer(
        moments_init(obs_shape, xp) if r.normalize_observations else None,
        moments_init((), xp) if r.scale_rewards else None,
    )


def normalizer_merge(a: Normalizer, b: Normalizer) -> Normalizer:
    """Both normalizers' samples in one."""
    return Normalizer(
        None if a.obs is None else moments_merge(a.obs, b.obs),  # type: ignore[arg-type]
        None if a.ret is None else moments_merge(a.ret, b.ret),  # type: ignore[arg-type]
    )


def scale_rewards(m: Moments, rewards: Any, clip: float) -> Any:
    """``clip(rewards / std(discounted return), -clip, clip)``, as float32."""
    return (rewards / moments_std(m)).clip(-clip, clip).astype(np.float32)


def discounted_returns(returns: Any, rewards: Any, done: Any, gamma: float) -> tuple[Any, Any]:
    """Each environment's running discounted return after this step's ``rewards``, and the
    same restarted at 0 where an episode ended (``done``): what the next step adds to."""
    returns = returns * gamma + rewards
    return returns, returns * (1 - done)


class HostNormalizer:
    """A rollout worker's normalizer: the run's statistics as last synced plus every sample
    this worker saw since (what it normalizes with), and those samples alone (its ``delta``,
    which the driver pops and merges into the run's statistics).

    Example:
        >>> norm = HostNormalizer(config, obs_shape=(3,), num_envs=2)  # doctest: +SKIP
        >>> obs = norm.observe(env_obs)                                # doctest: +SKIP
    """

    def __init__(self, config: Any, obs_shape: tuple[int, ...], num_envs: int):
        self.config, self.obs_shape = config, obs_shape
        self.clip = config.rollout.normalize_clip
        self.stats = normalizer_init(config, obs_shape)
        self.delta = normalizer_init(config, obs_shape)
        self._returns = np.zeros(num_envs, np.float64)
        # A worker sampling ahead (sample_async) counts samples on its thread while the
        # driver pops and sets statistics on the actor's.
        self._lock = threading.Lock()

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` ``[n, ...]`` counted into the statistics, then normalized with them."""
        if self.stats is None or self.stats.obs is None:
            return obs
        seen = moments_of(np.asarray(obs, np.float64))
        with self._lock:
            self.stats = self.stats._replace(obs=moments_merge(self.stats.obs, seen))
            self.delta = self.delta._replace(obs=moments_merge(self.delta.obs, seen))  # type: ignore[union-attr, arg-type]
        return self.normalize(obs)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` normalized with the current statistics, not counted (a final observation)."""
        if self.stats is None or self.stats.obs is None:
            return obs
        return normalize_observations(self.stats.obs, obs, self.clip)

    def rewards(self, cols: slice, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Environments ``cols``' rewards scaled by the running std of their discounted return."""
        if self.stats is None or self.stats.ret is None:
            return rewards
        returns, self._returns[cols] = discounted_returns(self._returns[cols], rewards, done, self.config.gamma)
        seen = moments_of(returns)
        with self._lock:
            ret = moments_merge(self.stats.ret, seen)
            self.stats = self.stats._replace(ret=ret)
            self.delta = self.delta._replace(ret=moments_merge(self.delta.ret, seen))  # type: ignore[union-attr, arg-type]
        return scale_rewards(ret, rewards, self.clip)

    def pop_delta(self) -> Normalizer | None:
        """The samples seen since the last call, forgotten here (the driver now holds them)."""
        with self._lock:
            delta, self.delta = self.delta, normalizer_init(self.config, self.obs_shape)
        return delta

    def set_stats(self, stats: Normalizer) -> None:
        """The run's statistics, plus what this worker saw since its delta was popped."""
        with self._lock:
            self.stats = stats if self.delta is None else normalizer_merge(stats, self.delta)


def refuse_normalization(config: Any, where: str) -> None:
    """One clear error where a run that normalizes would not (``where``: "in device mode")."""
    r = config.rollout
    require(
        not (r.normalize_observations or r.scale_rewards),
        f"{type(config).__name__}: normalize_observations and scale_rewards work on Ray rollout workers, not {where}; "
        "set them to false.",
    )
