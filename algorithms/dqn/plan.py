"""DQN's dataflow: store fragments, replay batches, update priorities and the target network."""

from __future__ import annotations

from fractions import Fraction

from jaxflow import (
    BroadcastWeights,
    Concurrently,
    LocalReplay,
    ParallelReplay,
    ParallelRollouts,
    ReplayShards,
    ReportMetrics,
    StoreToReplay,
    TrainOneStep,
    UpdatePriorities,
    UpdateTargetNetwork,
    UpdateWorkerWeights,
)
from jaxflow.algorithms.dqn.replay import (
    beta_schedule,
    sgd_steps_per_fragment,
)
from jaxflow.config import OffPolicyConfig
from jaxflow.ops.multiagent_ops import CountPolicyUpdates

SHARD_CALLS_IN_FLIGHT = 4
"""Stores and priority updates the asynchronous plan leaves unanswered before it waits (the
lockstep plan waits for each: shard actors are threaded, so calls in flight may run in any order)."""


def store_flow(rollouts, replay: ReplayShards | LocalReplay, config: OffPolicyConfig, in_turn: bool = False):
    """Fragments (n-step targets, priorities and rows made on the workers) into the replay;
    ``in_turn``: each store answered before the next call to the shards."""
    in_flight = 1 if in_turn else SHARD_CALLS_IN_FLIGHT
    return rollouts.for_each(StoreToReplay(replay, seed=config.seed, max_in_flight=in_flight))


def train_flow(
    learner,
    replay: ReplayShards | LocalReplay,
    config: OffPolicyConfig,
    batches_per_output: int = 1,
    in_turn: bool = False,
):
    """Replayed batches, split into SGD steps; TD errors become priorities (with prioritized
    replay: uniform replay draws every stored item alike whatever its TD error); the target lags.
    ``in_turn``: shards sampled round by round in shard order, every call answered before the next."""
    batch = batches_per_output * sgd_steps_per_fragment(config) * config.train_batch_size
    beta = beta_schedule(learner, config)
    replayed = ParallelReplay(replay, batch, beta=beta, sample_wait_s=0.0, in_turn=in_turn)
    trained = replayed.for_each(TrainOneStep(learner))
    if config.prioritized_replay:
        in_flight = 1 if in_turn else SHARD_CALLS_IN_FLIGHT
        trained = trained.for_each(UpdatePriorities(replay, config.prioritized_replay_eps, max_in_flight=in_flight))
    return trained.for_each(UpdateTargetNetwork(learner, config.target_update_period, config.tau))


def lockstep_plan(workers, learner, config: OffPolicyConfig, replay: ReplayShards | LocalReplay):
    """The plan of ``deterministic=True``: the same seed gives the same run. Each round every
    worker samples one fragment with the same weights, stored in worker order (RLlib's DQN
    plan: ``bulk_sync`` rollouts); then the round's SGD steps (``samples_per_insert`` as in
    :func:`plan`) on one replayed batch; then every worker gets the new weights. No call to a
    shard is left in flight, so nothing depends on which process answers first."""
    fragments_per_round = max(1, config.rollout.num_workers)
    store = store_flow(ParallelRollouts(workers, mode="bulk_sync"), replay, config, in_turn=True)
    train = train_flow(learner, replay, config, fragments_per_round, in_turn=True).for_each(
        BroadcastWeights(learner, workers)
    )
    return ReportMetrics(
        Concurrently([store, train], mode="round_robin", output_indexes=[1]),
        workers,
        config.min_env_steps_per_iteration,
    )


def plan(workers, learner, config: OffPolicyConfig, replay: ReplayShards | LocalReplay):
    if config.deterministic:
        return lockstep_plan(workers, learner, config, replay)
    # (1) workers sample asynchronously (one more fragment in flight while the driver trains) into
    #     the replay, and get fresh weights every few fragments
    store = store_flow(ParallelRollouts(workers, mode="async", num_async=2), replay, config).for_each(
        UpdateWorkerWeights(learner, workers, config.max_weight_sync_delay)
    )
    # (2) alternate storing a fragment and one replayed batch (a no-op until learning_starts)
    return ReportMetrics(
        Concurrently([store, train_flow(learner, replay, config)], mode="round_robin", output_indexes=[1]),
        workers,
        config.min_env_steps_per_iteration,
    )


def multiagent_flow(experiences, policy):
    """A replay policy (DQN, SAC, TD3, DDPG) of a multi-agent run: each round's fragments are
    stored, then replayed at the configured ratio; the workers, sampling in lockstep, get its
    weights after each update. Every call to its shards is answered before the next (``in_turn``),
    so the lockstep run is the same for the same seed."""
    fragments = policy.steps_per_round // (
        policy.config.rollout.num_envs_per_worker * policy.config.rollout.rollout_fragment_length
    )
    train = (
        train_flow(policy.learner, policy.replay, policy.config, fragments, in_turn=True)
        .for_each(BroadcastWeights(policy.learner, policy.workers))
        .for_each(CountPolicyUpdates(policy.id, policy.learner))
    )
    return [(store_flow(experiences, policy.replay, policy.config, in_turn=True), Fraction(1)), (train, Fraction(1))]
