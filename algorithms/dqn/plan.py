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


def store_flow(rollouts, replay: ReplayShards | LocalReplay, config: OffPolicyConfig):
    """Fragments (n-step targets, priorities and rows made on the workers) into the replay."""
    return rollouts.for_each(StoreToReplay(replay, seed=config.seed, max_in_flight=4))


def train_flow(learner, replay: ReplayShards | LocalReplay, config: OffPolicyConfig, batches_per_output: int = 1):
    """Replayed batches, split into SGD steps; TD errors become priorities (with prioritized
    replay: uniform replay draws every stored item alike whatever its TD error); the target lags."""
    batch = batches_per_output * sgd_steps_per_fragment(config) * config.train_batch_size
    trained = ParallelReplay(replay, batch, beta=beta_schedule(learner, config), sample_wait_s=0.0).for_each(
        TrainOneStep(learner)
    )
    if config.prioritized_replay:
        trained = trained.for_each(UpdatePriorities(replay, config.prioritized_replay_eps, max_in_flight=4))
    return trained.for_each(UpdateTargetNetwork(learner, config.target_update_period, config.tau))


def plan(workers, learner, config: OffPolicyConfig, replay: ReplayShards | LocalReplay):
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
    weights after each update."""
    fragments = policy.steps_per_round // (
        policy.config.rollout.num_envs_per_worker * policy.config.rollout.rollout_fragment_length
    )
    train = (
        train_flow(policy.learner, policy.replay, policy.config, fragments)
        .for_each(BroadcastWeights(policy.learner, policy.workers))
        .for_each(CountPolicyUpdates(policy.id, policy.learner))
    )
    return [(store_flow(experiences, policy.replay, policy.config), Fraction(1)), (train, Fraction(1))]
