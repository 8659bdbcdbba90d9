"""Ape-X DQN (Horgan et al., 2018, "Distributed Prioritized Experience Replay"): many
actors with a spread of exploration rates compute initial priorities and write to
sharded prioritized replay; one learner thread trains on replayed batches and sends
the new priorities back. DQN's loss, n-step targets and replay rows are imported,
not copied.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from jaxflow import (
    Concurrently,
    Dequeue,
    Enqueue,
    ParallelReplay,
    ParallelRollouts,
    ReportMetrics,
    RunHooks,
    StoreToReplay,
    UpdatePriorities,
    UpdateTargetNetwork,
    UpdateWorkerWeights,
    register_algorithm,
)
from jaxflow.algorithms.dqn import DQN, DQNConfig, beta_schedule, epsilon_greedy, make_replay
from jaxflow.config import DistributedReplayConfig, RolloutConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, SIZE, UNIT, param, require
from jaxflow.learn.to_device import ToDevice
from jaxflow.rollout.batch import SampleBatch

APE_X_PLAN = (
    "actors store into the replay shards and fetch weights, and a learner thread trains on "
    "replayed batches, each at its own pace"
)
"""Why Ape-X's plan (Ape-X DQN's, Ape-X DDPG's, R2D2's in Ray mode) cannot repeat a run exactly."""


@dataclasses.dataclass(frozen=True)
class APEXConfig(DQNConfig):
    """Ape-X settings: DQN's, plus the actors', the replay shards' and the learner thread's."""

    asynchronous_plan: ClassVar[str] = APE_X_PLAN

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=2, rollout_fragment_length=16))
    """Actors (see :class:`~jaxflow.config.RolloutConfig`), each with its own exploration rate;
    Ape-X has two by default (at least one), with DQN's 16-step fragments."""
    num_replay_shards: int = param(2, SIZE)
    """Replay shard actors; each fragment goes to one chosen at random."""
    buffer_size: int = param(100_000, SIZE)
    """Transitions kept over all replay shards."""
    train_batch_size: int = param(128, SIZE)
    """Replayed transitions per SGD step."""
    distributed: DistributedReplayConfig = param(None, factory=DistributedReplayConfig)
    """Replay requests, requests in flight and the learner thread's queues (see
    :class:`~jaxflow.config.DistributedReplayConfig`)."""
    samples_per_insert: float | None = None  # type: ignore[assignment]  # Ape-X's limiter is optional, DQN's is not
    """Rate limiter (Reverb's sample-to-insert ratio) on every shard; None (default) lets the
    learner replay as fast as it can, as in the paper."""
    target_update_period: int = param(100, SIZE)
    """SGD steps between target network copies."""
    max_weight_sync_delay: int = param(400, SIZE)
    """Env steps an actor samples between two fetches of the learner's weights (the paper's 400)."""
    worker_epsilon_base: float = param(0.4, UNIT)
    """epsilon in ``eps_i = epsilon^(1 + alpha * i / (N - 1))``."""
    worker_epsilon_alpha: float = param(7.0, NON_NEGATIVE)
    """alpha in ``eps_i = epsilon^(1 + alpha * i / (N - 1))``."""
    min_env_steps_per_iteration: int = param(5_000, COUNT)
    """Env steps sampled per reported training iteration."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_distributed(self)


def check_distributed(config: Any) -> None:
    """What Ape-X's plan needs of any config it runs: whole SGD steps in a replay request,
    actors that are Ray actors, and a rate limiter that is off or positive."""
    name, batch = type(config).__name__, config.distributed.replay_batch_size
    require(
        batch % config.train_batch_size == 0,
        f"replay_batch_size ({batch}) must be a multiple of train_batch_size ({config.train_batch_size}).",
    )
    require(config.rollout.num_workers >= 1, f"{name}.num_workers must be >= 1: its actors are Ray actors.")
    require(
        config.samples_per_insert is None or config.samples_per_insert > 0,
        f"{name}.samples_per_insert must be None (no rate limiter) or > 0, got {config.samples_per_insert!r}.",
    )


def actor_rate(base: float, alpha: float, worker_index: int, num_workers: int) -> float:
    """Ape-X's fixed per-actor exploration ``base^(1 + alpha i / (N - 1))`` (Horgan et al.,
    2018, Section 4.1: epsilons for DQN); a single actor uses ``base``.

    Example:
        >>> [round(actor_rate(0.4, 7.0, i, 3), 4) for i in range(3)]
        [0.4, 0.0162, 0.0007]
    """
    exponent = 1.0 + (alpha * worker_index / (num_workers - 1) if num_workers > 1 else 0.0)
    return base**exponent


def worker_epsilon(config: APEXConfig, worker_index: int) -> float:
    """Actor ``worker_index``'s epsilon, :func:`actor_rate` of ``worker_epsilon_base``."""
    return actor_rate(config.worker_epsilon_base, config.worker_epsilon_alpha, worker_index, config.rollout.num_workers)


def explore(
    rng: np.random.Generator, q: np.ndarray, config: APEXConfig, worker_index: int, env_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    return epsilon_greedy(rng, q, worker_epsilon(config, worker_index))


def make_limited_replay(config: APEXConfig) -> Any:
    # The slack admits one actor's fragment after a full batch, so some call can always proceed.
    r = config.samples_per_insert
    fragment = config.rollout.num_envs_per_worker * config.rollout.rollout_fragment_length
    slack = 0.0 if r is None else r * fragment + config.distributed.replay_batch_size
    return make_replay(config, r, slack)


def plan(workers, learner, config: Any, replay, importance=beta_schedule, by_actor: bool = False):
    """Ape-X's dataflow for a config with Ape-X's fields (:class:`APEXConfig`'s, R2D2's).
    R2D2 runs it too, with its own ``importance(learner, config)`` (the
    importance-sampling exponent of each replay request) and ``by_actor``: each actor's
    fragments go, in order, to one shard (``StoreToReplay(by_actor=True)``), one request in
    flight per actor, so its sequences run on from fragment to fragment."""
    d = config.distributed
    thread = learner.start_thread(inqueue_size=d.learner_queue_size, outqueue_size=d.learner_queue_size)
    # (1) actors sample asynchronously into random shards (or each into its own) and fetch new weights every so often
    #     (with a learner group, a shard fetches the rows from the actor's node itself)
    store_op = StoreToReplay(replay, seed=config.seed, max_in_flight=1 if by_actor else 4, by_actor=by_actor)
    rollouts = ParallelRollouts(
        workers,
        mode="async",
        num_async=1 if by_actor else d.rollouts_num_async,
        to_learner=learner,
        to_host=SampleBatch.replay_rows,
    )
    store = rollouts.for_each(store_op).for_each(UpdateWorkerWeights(learner, workers, config.max_weight_sync_delay))
    # (2) replayed batches from every shard go to the learner's devices ahead of the learner thread
    #     (a learner group's processes fetch them from the shards' nodes)
    replayed = ParallelReplay(
        replay, d.replay_batch_size, importance(learner, config), d.replay_num_async, to_learner=learner
    )
    feed = ToDevice(replayed, learner).for_each(Enqueue(thread))
    # (3) the learner's TD errors go back to the shards as priorities; the target network lags
    update = (
        Dequeue(thread)
        .for_each(UpdatePriorities(replay, config.prioritized_replay_eps, max_in_flight=4))
        .for_each(UpdateTargetNetwork(learner, config.target_update_period, config.tau))
    )
    return ReportMetrics(
        Concurrently([store, feed, update], mode="async", output_indexes=[2]),
        workers,
        config.min_env_steps_per_iteration,
    )


# DQN's spec (loss, postprocess, Q-policy, target network, replay rows) with Ape-X's actors,
# rate-limited shards and plan; no device mode or multi-agent flow.
APEX = register_algorithm(
    dataclasses.replace(
        DQN,
        name="APEX",
        config_cls=APEXConfig,
        plan=plan,
        workers=dataclasses.replace(DQN.workers, explore=explore),
        run=RunHooks(replay=make_limited_replay),
    )
)
