"""Operators of multi-agent runs (Liang et al., 2021, "RLlib Flow", Section 5): route each
policy's experiences to its algorithm's sub-flow, sync only that policy's weights, count its
updates, and weigh the sub-flows so that all keep pace with sampling.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from jaxflow.dataflow.iterators import Operator
from jaxflow.ops.metrics import Context, EpisodeWindow
from jaxflow.rollout.batch import SampleBatch, concat_batches
from jaxflow.rollout.multiagent import MultiAgentBatch
from jaxflow.rollout.worker_set import WorkerSet


class PolicyWorkers:
    """One policy's view of the run's workers: weight syncs send that policy's weights only.
    Single-agent operators (``BroadcastWeights``, ``UpdateWorkerWeights``) take it in place
    of a :class:`~jaxflow.rollout.worker_set.WorkerSet`."""

    def __init__(self, workers: WorkerSet, policy_id: str):
        self.workers, self.policy_id = workers, policy_id

    def sync_weights(self, weights: Any, version: int) -> None:
        self.workers.sync_weights({self.policy_id: weights}, {self.policy_id: version})

    def set_weights_of(self, index: int, weights: Any, version: int) -> None:
        self.workers.set_weights_of(index, {self.policy_id: weights}, {self.policy_id: version})


class SelectExperiences(Operator):
    """A multi-agent batch -> the :class:`~jaxflow.rollout.batch.SampleBatch` of the given policies
    (joined, if several), and their episode statistics under ``policies`` in the results.

    Example:
        >>> ppo_batches = rollouts.for_each(SelectExperiences(["ppo"]))  # doctest: +SKIP
    """

    def __init__(self, policy_ids: Sequence[str], num_episodes: int = 100):
        self.policy_ids = list(policy_ids)
        self._episodes = {pid: EpisodeWindow(num_episodes) for pid in self.policy_ids}

    def __call__(self, batch: MultiAgentBatch, ctx: Context) -> SampleBatch:
        stats = ctx.info.setdefault("policies", {})
        for pid in self.policy_ids:
            b = batch.policy_batches[pid]
            self._episodes[pid].record(b.episode_returns, b.episode_lengths)
            entry = stats.setdefault(pid, {})
            entry.update(self._episodes[pid].summary())
            entry["agent_steps_sampled"] = entry.get("agent_steps_sampled", 0) + b.env_steps
        return concat_batches([batch.policy_batches[pid] for pid in self.policy_ids])


class CountPolicyUpdates(Operator):
    """Counts the updates of one policy (each output of its training sub-flow) and keeps its
    learner's optimizer steps and latest statistics under ``policies`` in the results."""

    def __init__(self, policy_id: str, learner: Any):
        self.policy_id, self.learner = policy_id, learner

    def __call__(self, item: Any, ctx: Context) -> Any:
        entry = ctx.info.setdefault("policies", {}).setdefault(self.policy_id, {})
        entry["num_updates"] = entry.get("num_updates", 0) + 1
        entry["sgd_steps"] = self.learner.version
        metrics = item[1] if isinstance(item, tuple) else item
        if isinstance(metrics, Mapping):
            entry["learner"] = {k: v for k, v in metrics.items() if isinstance(v, float)}
        return item


class PolicySlot(NamedTuple):
    """One policy of a run as a multi-agent plan sees it: its algorithm, learner, share of
    the workers and replay."""

    id: str
    spec: Any
    config: Any
    learner: Any
    workers: PolicyWorkers
    replay: Any
    steps_per_round: int
    """Agent steps of this policy in one bulk-synchronous round of every worker."""


def on_policy_flow(train_flow: Any) -> Any:
    """The multi-agent ``flow`` of an algorithm whose sub-flow ``train_flow(rollouts, learner,
    workers, config)`` makes one update per train batch (A2C, PPO): an update every k rounds,
    k the rounds of sampling a train batch of this policy's agent steps takes."""

    def flow(experiences: Any, policy: PolicySlot) -> list[tuple[Any, Fraction]]:
        rounds = -(-policy.config.train_batch_size // policy.steps_per_round)
        train = train_flow(experiences, policy.learner, policy.workers, policy.config)
        return [(train.for_each(CountPolicyUpdates(policy.id, policy.learner)), Fraction(1, rounds))]

    return flow


def round_robin_weights(rates: Sequence[Fraction]) -> list[int]:
    """Round-robin weights for sub-flows that yield ``rates[i]`` outputs per round of
    sampling (PPO: 1/k when its train batch takes k rounds; DQN: one store per round and one
    replayed batch per fragment stored), so every flow keeps pace with the rollout stream."""
    scale = math.lcm(*(r.denominator for r in rates))
    return [int(r * scale) for r in rates]
