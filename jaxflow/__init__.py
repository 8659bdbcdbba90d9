"""jaxflow: algorithms as short dataflow programs, numerics in JAX, actors in Ray."""

from jaxflow.algorithm import Algorithm, AlgorithmSpec, evaluate_policy, get_algorithm, list_algorithms, register_algorithm
from jaxflow.checkpoint import CheckpointError
from jaxflow.config import CommonConfig, ConfigError
from jaxflow.iterators import (
    NOT_READY,
    ActorPool,
    BackpressureError,
    Concurrently,
    LocalIterator,
    Operator,
    ParallelIterator,
    WorkerError,
    from_actors,
    from_items,
    from_iterator,
)
from jaxflow.learner import Learner, TrainState, make_optimizer
from jaxflow.metrics import Context
from jaxflow.networks import MLPActorCritic
from jaxflow.operators import (
    ApplyGradients,
    BroadcastWeights,
    ComputeGradients,
    ConcatBatches,
    ParallelReplay,
    ParallelRollouts,
    ReportMetrics,
    StandardizeFields,
    StoreToReplay,
    TrainOneStep,
    UpdatePriorities,
)
from jaxflow.replay import PrioritizedReplayBuffer, SumTree
from jaxflow.replay_shards import ReplayBatch, ReplayShard, ReplayShards
from jaxflow.run import train
from jaxflow.workers import RolloutWorker, SampleBatch, WorkerCrashedError, WorkerSet, WorkerSpec

__all__ = [
    "NOT_READY",
    "ActorPool",
    "Algorithm",
    "AlgorithmSpec",
    "ApplyGradients",
    "BackpressureError",
    "BroadcastWeights",
    "CheckpointError",
    "CommonConfig",
    "ComputeGradients",
    "ConcatBatches",
    "Concurrently",
    "ConfigError",
    "Context",
    "Learner",
    "LocalIterator",
    "MLPActorCritic",
    "Operator",
    "ParallelIterator",
    "ParallelReplay",
    "ParallelRollouts",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayShard",
    "ReplayShards",
    "ReportMetrics",
    "RolloutWorker",
    "SampleBatch",
    "StandardizeFields",
    "StoreToReplay",
    "SumTree",
    "TrainOneStep",
    "TrainState",
    "UpdatePriorities",
    "WorkerCrashedError",
    "WorkerError",
    "WorkerSet",
    "WorkerSpec",
    "evaluate_policy",
    "from_actors",
    "from_items",
    "from_iterator",
    "get_algorithm",
    "list_algorithms",
    "make_optimizer",
    "register_algorithm",
    "train",
]
