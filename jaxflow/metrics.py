"""Metrics that flow with a plan: the per-plan :class:`Context`, and result writers.

A plan's iterators share one :class:`Context` (counters, recent episodes, the last
learner statistics); operators update it as items pass, and ``ReportMetrics``
turns it into the result dict of each training iteration.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import sys
from typing import Any, Mapping

import numpy as np

# Standard result keys (DESIGN.md).
ENV_STEPS_SAMPLED = "env_steps_sampled"
ENV_STEPS_TRAINED = "env_steps_trained"
NUM_UPDATES = "num_updates"
NUM_WEIGHT_SYNCS = "num_weight_syncs"


@dataclasses.dataclass
class Context:
    """Metrics of one plan, shared by all of its iterators.

    ``current_actor`` is ``(index, handle)`` of the actor that produced the item
    being processed, set by the gathers (A3C sends weights back to it alone).
    """

    num_episodes: int = 100
    counters: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    episode_returns: collections.deque = dataclasses.field(default=None)  # type: ignore[assignment]
    episode_lengths: collections.deque = dataclasses.field(default=None)  # type: ignore[assignment]
    episodes_total: int = 0
    current_actor: tuple[int, Any] | None = None

    def __post_init__(self) -> None:
        if self.episode_returns is None:
            self.episode_returns = collections.deque(maxlen=self.num_episodes)
        if self.episode_lengths is None:
            self.episode_lengths = collections.deque(maxlen=self.num_episodes)

    def record_episodes(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        self.episode_returns.extend(np.asarray(returns).tolist())
        self.episode_lengths.extend(np.asarray(lengths).tolist())
        self.episodes_total += len(returns)

    def merge_into(self, other: "Context") -> None:
        """Adds this context's counts and episodes to ``other`` (for union of plans)."""
        other.counters.update(self.counters)
        other.info.update(self.info)
        other.episode_returns.extend(self.episode_returns)
        other.episode_lengths.extend(self.episode_lengths)
        other.episodes_total += self.episodes_total

    def state(self) -> dict[str, Any]:
        """JSON-able state, for checkpoints."""
        return {
            "counters": dict(self.counters),
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "episodes_total": self.episodes_total,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.counters.clear()
        self.counters.update(state["counters"])
        self.episode_returns.clear()
        self.episode_returns.extend(state["episode_returns"])
        self.episode_lengths.clear()
        self.episode_lengths.extend(state["episode_lengths"])
        self.episodes_total = int(state["episodes_total"])


def _scalars(result: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flattens nested numeric results to ``{"learner/loss": 0.1, ...}``."""
    out: dict[str, float] = {}
    for k, v in result.items():
        if isinstance(v, Mapping):
            out.update(_scalars(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
            out[prefix + k] = float(v)
    return out


class JsonLinesWriter:
    """Appends one JSON object per iteration to ``progress.jsonl`` (NaN written as null)."""

    def __init__(self, logdir: str):
        os.makedirs(logdir, exist_ok=True)
        self._f = open(os.path.join(logdir, "progress.jsonl"), "a", encoding="utf-8")

    def write(self, result: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(_json_safe(result)) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _json_safe(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if not math.isfinite(float(x)) else float(x)
    return x


class TensorBoardWriter:
    """Writes every numeric result as a TensorBoard scalar, stepped by env steps sampled."""

    def __init__(self, logdir: str):
        from tensorboardX import SummaryWriter

        self._w = SummaryWriter(logdir)

    def write(self, result: Mapping[str, Any]) -> None:
        step = int(result.get(ENV_STEPS_SAMPLED, result.get("training_iteration", 0)))
        for k, v in _scalars(result).items():
            if math.isfinite(v):
                self._w.add_scalar(k, v, step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()


class ConsoleProgress:
    """A progress bar on a terminal (tqdm), one plain line per iteration otherwise."""

    def __init__(self, stop: Mapping[str, float]):
        from tqdm import tqdm

        self._key = next((k for k in ("env_steps_sampled", "training_iteration", "time_s") if k in stop), None)
        self._tty = sys.stderr.isatty()
        total = stop.get(self._key) if self._key else None
        self._bar = tqdm(total=total, unit=" steps" if self._key == "env_steps_sampled" else " it", disable=not self._tty)
        self._last = 0.0

    def write(self, result: Mapping[str, Any]) -> None:
        ret = result.get("episode_return_mean", float("nan"))
        line = (
            f"iter {result['training_iteration']:>4d}  steps {result[ENV_STEPS_SAMPLED]:>9,d}  "
            f"return {ret:7.1f}  {result.get('env_steps_per_s', 0):>8,.0f} steps/s  {result['time_s']:6.1f}s"
        )
        if not self._tty:
            print(line, flush=True)
            return
        if self._key:
            now = float(result[self._key])
            self._bar.update(now - self._last)
            self._last = now
        self._bar.set_postfix_str(f"return {ret:.1f}, {result.get('env_steps_per_s', 0):,.0f} steps/s")

    def close(self) -> None:
        self._bar.close()
