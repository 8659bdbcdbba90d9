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
from typing import Any, Mapping, Sequence

import numpy as np

# Standard result keys (DESIGN.md).
ENV_STEPS_SAMPLED = "env_steps_sampled"
ENV_STEPS_TRAINED = "env_steps_trained"
NUM_UPDATES = "num_updates"
NUM_WEIGHT_SYNCS = "num_weight_syncs"


class EpisodeWindow:
    """The most recent episodes of one agent: returns, lengths, and how many ended in all."""

    def __init__(self, size: int):
        self.returns: collections.deque = collections.deque(maxlen=size)
        self.lengths: collections.deque = collections.deque(maxlen=size)
        self.total = 0

    def record(self, returns: Any, lengths: Any) -> None:
        self.returns.extend(np.asarray(returns).tolist())
        self.lengths.extend(np.asarray(lengths).tolist())
        self.total += len(returns)

    def extend(self, other: "EpisodeWindow") -> None:
        self.returns.extend(other.returns)
        self.lengths.extend(other.lengths)
        self.total += other.total

    def summary(self) -> dict[str, float]:
        """Mean, min and max return and mean length of the window (NaN while empty), episodes in all."""
        r, n = np.asarray(self.returns, np.float64), np.asarray(self.lengths, np.float64)
        nan = float("nan")
        return {
            "episode_return_mean": float(r.mean()) if len(r) else nan,
            "episode_return_min": float(r.min()) if len(r) else nan,
            "episode_return_max": float(r.max()) if len(r) else nan,
            "episode_len_mean": float(n.mean()) if len(n) else nan,
            "episodes": self.total,
        }

    def state(self) -> dict[str, Any]:
        return {"episode_returns": list(self.returns), "episode_lengths": list(self.lengths), "episodes_total": self.total}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.returns.clear()
        self.returns.extend(state["episode_returns"])
        self.lengths.clear()
        self.lengths.extend(state["episode_lengths"])
        self.total = int(state["episodes_total"])


@dataclasses.dataclass
class Context:
    """Metrics of one plan, shared by all of its iterators.

    ``current_actor`` is ``(index, handle)`` of the actor that produced the item
    being processed, set by the gathers (A3C sends weights back to it alone).
    ``member_names`` names independent agents trained together (device mode's seeds and
    sweeps); each keeps its own window of episodes in ``members``.
    """

    num_episodes: int = 100
    counters: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    current_actor: tuple[int, Any] | None = None
    member_names: Sequence[str] = ()
    episodes: EpisodeWindow = dataclasses.field(init=False)
    members: list[EpisodeWindow] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.episodes = EpisodeWindow(self.num_episodes)
        self.members = [EpisodeWindow(self.num_episodes) for _ in self.member_names]

    def record_episodes(self, returns: Any, lengths: Any, member: int | None = None) -> None:
        """Adds ended episodes to the run's window (and to ``member``'s, for several agents)."""
        self.episodes.record(returns, lengths)
        if member is not None:
            self.members[member].record(returns, lengths)

    def merge_into(self, other: "Context") -> None:
        """Adds this context's counts and episodes to ``other`` (for union of plans)."""
        other.counters.update(self.counters)
        other.info.update(self.info)
        other.episodes.extend(self.episodes)

    def episode_stats(self) -> dict[str, float]:
        """The run's episode statistics: its window's, or with several members the means of
        theirs (so that each agent counts once, however short its episodes)."""
        if not self.members:
            return self.episodes.summary()
        per_member = [m.summary() for m in self.members]
        return {k: float(np.mean([m[k] for m in per_member])) if k != "episodes" else self.episodes.total for k in per_member[0]}

    def member_results(self) -> dict[str, dict[str, float]]:
        """Each member's episode statistics, by member name."""
        return {name: m.summary() for name, m in zip(self.member_names, self.members)}

    def state(self) -> dict[str, Any]:
        """JSON-able state, for checkpoints."""
        return dict(self.episodes.state(), counters=dict(self.counters), members=[m.state() for m in self.members])

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.counters.clear()
        self.counters.update(state["counters"])
        self.episodes.load_state(state)
        for m, saved in zip(self.members, state.get("members", [])):
            m.load_state(saved)


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
