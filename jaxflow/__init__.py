"""jaxflow: algorithms as short dataflow programs, numerics in JAX, actors in Ray."""

from jaxflow.algorithm import Algorithm, AlgorithmSpec, evaluate_policy, get_algorithm, list_algorithms, register_algorithm
from jaxflow.checkpoint import CheckpointError
from jaxflow.config import CommonConfig, ConfigError
from jaxflow.device import DeviceBatch, ToDevice, ToDeviceError
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
from jaxflow.learner import Learner, LearnerThread, LearnerThreadError, TrainState, make_optimizer
from jaxflow.metrics import Context
from jaxflow.networks import MLPActorCritic, MLPQNetwork
from jaxflow.operators import (
    ApplyGradients,
    BroadcastWeights,
    ComputeGradients,
    ConcatBatches,
    Dequeue,
    Enqueue,
    ParallelReplay,
    ParallelRollouts,
    ReportMetrics,
    StandardizeFields,
    StoreToReplay,
    TrainOneStep,
    UpdatePriorities,
    UpdateTargetNetwork,
    UpdateWorkerWeights,
)
from jaxflow.replay import PrioritizedReplayBuffer, ReplayRows, SumTree
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
    "Dequeue",
    "DeviceBatch",
    "Enqueue",
    "Learner",
    "LearnerThread",
    "LearnerThreadError",
    "LocalIterator",
    "MLPActorCritic",
    "MLPQNetwork",
    "Operator",
    "ParallelIterator",
    "ParallelReplay",
    "ParallelRollouts",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayRows",
    "ReplayShard",
    "ReplayShards",
    "ReportMetrics",
    "RolloutWorker",
    "SampleBatch",
    "StandardizeFields",
    "StoreToReplay",
    "SumTree",
    "ToDevice",
    "ToDeviceError",
    "TrainOneStep",
    "TrainState",
    "UpdatePriorities",
    "UpdateTargetNetwork",
    "UpdateWorkerWeights",
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
