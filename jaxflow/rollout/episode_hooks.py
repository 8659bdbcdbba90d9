"""A user's ``on_episode_end`` where episodes end: the :class:`EpisodeEnd` it is given, the
metrics it returns collected per fragment (rollout workers, device mode's host), and their
summary per training iteration, RLlib's ``<name>_mean`` / ``_min`` / ``_max``.

The callbacks themselves, and how a run names them, are :mod:`jaxflow.api.callbacks`'.

Example:
    >>> class Lengths:
    ...     def on_episode_end(self, episode):
    ...         return {"len": episode.length}
    >>> hooks = episode_hooks([Lengths(), object()])
    >>> ends = [EpisodeEnd(0, 1, 10.0, 10, None), EpisodeEnd(0, 0, 30.0, 30, {})]
    >>> summarize(call_episode_hooks(hooks, ends))
    {'len_mean': 20.0, 'len_min': 10.0, 'len_max': 30.0}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxflow.config.fields import ConfigError

EPISODE_HOOK = "on_episode_end"
"""The method a callback object has to be called where each episode ends."""

CUSTOM_METRICS = "custom_metrics"
"""The result key of the metrics callbacks report: each episode metric's summary, and what
``on_train_result`` adds."""

SUMMARIES: tuple[tuple[str, Callable[[np.ndarray], Any]], ...] = (("mean", np.mean), ("min", np.min), ("max", np.max))
"""The suffixes of an episode metric's summary over an iteration's episodes, and how each is computed."""

EpisodeMetrics = dict[str, list[float]]
"""Per metric name, the values the episodes that returned it gave, in the order they ended."""

EpisodeHook = Callable[["EpisodeEnd"], "Mapping[str, float] | None"]


class EpisodeEnd(NamedTuple):
    """An episode that ended, as ``on_episode_end`` is given it.

    ``worker_index``: the rollout worker that played it (0 the driver's own, with
    ``num_workers=0``; None in device mode); ``env_index``: its env in that worker (in device
    mode, in the member's batch of envs); ``info``: the env's ``info`` dict of the episode's
    last step (None in device mode, and for ale-py's and envpool's vectors, which keep no
    per-env dict).
    """

    worker_index: int | None
    env_index: int
    episode_return: float
    length: int
    info: Mapping[str, Any] | None


class EpisodeHookError(ConfigError):
    """An ``on_episode_end`` returned something other than a mapping of names to numbers, or None."""


def episode_hooks(callbacks: Iterable[Any]) -> tuple[EpisodeHook, ...]:
    """The ``on_episode_end`` methods of those of ``callbacks`` that have one, in order."""
    return tuple(getattr(c, EPISODE_HOOK) for c in callbacks if callable(getattr(c, EPISODE_HOOK, None)))


def call_episode_hooks(hooks: Sequence[EpisodeHook], episodes: Iterable[EpisodeEnd]) -> EpisodeMetrics:
    """Calls every hook on every episode, in order; returns the metrics they gave."""
    metrics: EpisodeMetrics = {}
    for episode in episodes:
        for hook in hooks:
            given = hook(episode)
            for name, value in _checked(given, hook).items():
                metrics.setdefault(name, []).append(value)
    return metrics


def _checked(given: Any, hook: EpisodeHook) -> dict[str, float]:
    """``given`` as ``{name: float}``; raises :class:`EpisodeHookError` naming ``hook`` otherwise."""
    if given is None:
        return {}
    ok = isinstance(given, Mapping) and all(
        isinstance(k, str) and isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
        for k, v in given.items()
    )
    if not ok:
        owner = type(getattr(hook, "__self__", hook)).__qualname__
        raise EpisodeHookError(
            f"{owner}.{EPISODE_HOOK} returned {given!r:.200}; it returns a mapping of metric names to numbers, or None."
        )
    return {k: float(v) for k, v in given.items()}


def merge_metrics(parts: Iterable[EpisodeMetrics | None]) -> EpisodeMetrics | None:
    """The metrics of several fragments joined, in order (None where none has any)."""
    merged: EpisodeMetrics = {}
    for part in parts:
        for name, values in (part or {}).items():
            merged.setdefault(name, []).extend(values)
    return merged or None


def summarize(metrics: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """``<name>_mean``, ``_min`` and ``_max`` of each metric's values, by name."""
    out: dict[str, float] = {}
    for name, values in metrics.items():
        array = np.asarray(values, np.float64)
        out.update({f"{name}_{suffix}": float(fn(array)) for suffix, fn in SUMMARIES})
    return out
