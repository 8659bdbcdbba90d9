"""Metrics that flow with a plan: the per-plan :class:`Context`, and result writers.

A plan's iterators share one :class:`Context` (counters, recent episodes, the last
learner statistics); operators update it as items pass, and ``ReportMetrics``
turns it into the result dict of each training iteration.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxflow.config.constants import ENV_STEPS_SAMPLED as ENV_STEPS_SAMPLED  # the standard keys, still importable here
from jaxflow.config.constants import ENV_STEPS_TRAINED as ENV_STEPS_TRAINED
from jaxflow.config.constants import NUM_UPDATES as NUM_UPDATES
from jaxflow.config.constants import NUM_WEIGHT_SYNCS as NUM_WEIGHT_SYNCS
from jaxflow.config.constants import TRAINING_ITERATION as TRAINING_ITERATION
from jaxflow.dataflow.context import FlowContext
from jaxflow.rollout.episode_hooks import EpisodeMetrics, summarize


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

    def extend(self, other: EpisodeWindow) -> None:
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
        return {
            "episode_returns": list(self.returns),
            "episode_lengths": list(self.lengths),
            "episodes_total": self.total,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.returns.clear()
        self.returns.extend(state["episode_returns"])
        self.lengths.clear()
        self.lengths.extend(state["episode_lengths"])
        self.total = int(state["episodes_total"])


@dataclasses.dataclass
class Context(FlowContext):
    """Metrics of one RL plan, shared by all of its iterators: the dataflow's counters and
    information, plus the most recent episodes.

    ``current_actor`` (A3C sends weights back to that worker alone) is set by the gathers.
    ``member_names`` names independent agents trained together (device mode's seeds and
    sweeps); each keeps its own window of episodes in ``members``.
    """

    num_episodes: int = 100
    member_names: Sequence[str] = ()
    episodes: EpisodeWindow = dataclasses.field(init=False)
    members: list[EpisodeWindow] = dataclasses.field(init=False)
    episode_metrics: EpisodeMetrics = dataclasses.field(init=False)
    """The ``on_episode_end`` metrics of the episodes ended since the last result (not checkpointed)."""

    def __post_init__(self) -> None:
        self.episodes = EpisodeWindow(self.num_episodes)
        self.members = [EpisodeWindow(self.num_episodes) for _ in self.member_names]
        self.episode_metrics = {}

    def record_episodes(self, returns: Any, lengths: Any, member: int | None = None) -> None:
        """Adds ended episodes to the run's window (and to ``member``'s, for several agents)."""
        self.episodes.record(returns, lengths)
        if member is not None:
            self.members[member].record(returns, lengths)

    def record_episode_metrics(self, metrics: EpisodeMetrics | None) -> None:
        """Adds the ``on_episode_end`` metrics of ended episodes to this iteration's."""
        for name, values in (metrics or {}).items():
            self.episode_metrics.setdefault(name, []).extend(values)

    def pop_custom_metrics(self) -> dict[str, float]:
        """This iteration's episode metrics summarized (``<name>_mean``, ``_min``, ``_max``),
        and a new iteration's started."""
        metrics, self.episode_metrics = self.episode_metrics, {}  # one swap: samplers on threads record on
        return summarize(metrics)

    def merge_into(self, other: FlowContext) -> None:
        """Adds this context's counts and episodes to ``other`` (for union of plans)."""
        super().merge_into(other)
        if isinstance(other, Context):
            other.episodes.extend(self.episodes)
            other.record_episode_metrics(self.episode_metrics)

    def episode_stats(self) -> dict[str, float]:
        """The run's episode statistics: its window's, or with several members the means of
        theirs (so that each agent counts once, however short its episodes)."""
        if not self.members:
            return self.episodes.summary()
        per_member = [m.summary() for m in self.members]
        return {
            k: float(np.mean([m[k] for m in per_member])) if k != "episodes" else self.episodes.total
            for k in per_member[0]
        }

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
