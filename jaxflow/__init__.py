"""jaxflow: algorithms as short dataflow programs, numerics in JAX, actors in Ray.

This module is the one import surface for algorithm pages and notebooks. Its names load
on first use (PEP 562), so that ``import jaxflow.envs`` does not bring in the engine and
``import jaxflow`` starts no JAX, Ray or algorithm import before something is asked for.
The engine's parts live in sub-packages: ``api``, ``config``, ``dataflow``, ``ops``,
``rollout``, ``learn``, ``replay``, ``ondevice``, ``networks``, ``tune`` (see docs/architecture.md).
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING

from jaxflow._lazy import lazy_exports

# In a notebook without ipywidgets, importing tqdm.auto (Ray and others do) warns that its widget
# is missing; jaxflow's progress then prints lines instead (api.writers.progress_display).
warnings.filterwarnings("ignore", message="IProgress not found", category=Warning)
# Ray's notebook check logs "Missing packages: ['ipywidgets']" (info) when `import ray` defines its
# classes' notebook views, before any ray.init could set its logging: quieted here, where it is sure to be first.
logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)

_NAMES_BY_PART: dict[str, str] = {
    "jaxflow.api": (
        "Algorithm AlgorithmSpec Callbacks CheckpointError get_algorithm LearnerHooks list_algorithms Program RayProgram "
        "register_algorithm RunHooks train WorkerHooks"
    ),
    "jaxflow.config": (
        "CommonConfig ConfigError DeviceConfig make_config NON_NEGATIVE OffPolicyConfig OptimizerConfig param POSITIVE "
        "replace_config require RolloutConfig UNIT"
    ),
    "jaxflow.dataflow": (
        "ActorPlacementError ActorPool BackpressureError Concurrently FlowContext from_actors from_items from_iterator jax_actor "
        "LocalIterator NOT_READY Operator ParallelIterator Placement Producer ProducerError WorkerError"
    ),
    "jaxflow.learn": (
        "DeviceBatch Learner LearnerThread LearnerThreadError make_optimizer ToDevice ToDeviceError TrainState"
    ),
    "jaxflow.networks": "MLPActorCritic MLPQNetwork q_network register_model",
    "jaxflow.ondevice": "AnakinState DeviceProgram DeviceReplay DeviceSpec flat_batch OnDevice",
    "jaxflow.ops": (
        "ApplyGradients BroadcastWeights bulk_sync_env_steps ComputeGradients ConcatBatches Context "
        "CountPolicyUpdates Dequeue Enqueue on_policy_flow ParallelReplay ParallelRollouts PolicyWorkers "
        "ReportMetrics round_robin_weights SelectExperiences standardize_fields StandardizeFields "
        "StoreToReplay TrainOneStep UpdatePriorities UpdateTargetNetwork UpdateWorkerWeights"
    ),
    "jaxflow.replay": (
        "encode_fragment encode_stacks LocalReplay PrioritizedReplayBuffer replay_in_driver ReplayBatch "
        "ReplayRows ReplayShard ReplayShards ReplaySource SumTree"
    ),
    "jaxflow.rollout": (
        "Batch EpisodeEnd evaluate_policy HostPostprocess make_vector_envs MultiAgentBatch MultiAgentRolloutWorker "
        "PER_ENV_FIELDS RolloutWorker SampleBatch SampleTiming train_arrays WorkerCrashedError WorkerSet "
        "WorkerSpec"
    ),
}

__all__ = [
    "NON_NEGATIVE",
    "NOT_READY",
    "PER_ENV_FIELDS",
    "POSITIVE",
    "UNIT",
    "ActorPlacementError",
    "ActorPool",
    "Algorithm",
    "AlgorithmSpec",
    "AnakinState",
    "ApplyGradients",
    "BackpressureError",
    "Batch",
    "BroadcastWeights",
    "Callbacks",
    "CheckpointError",
    "CommonConfig",
    "ComputeGradients",
    "ConcatBatches",
    "Concurrently",
    "ConfigError",
    "Context",
    "CountPolicyUpdates",
    "Dequeue",
    "DeviceBatch",
    "DeviceConfig",
    "DeviceProgram",
    "DeviceReplay",
    "DeviceSpec",
    "Enqueue",
    "EpisodeEnd",
    "FlowContext",
    "HostPostprocess",
    "Learner",
    "LearnerHooks",
    "LearnerThread",
    "LearnerThreadError",
    "LocalIterator",
    "LocalReplay",
    "MLPActorCritic",
    "MLPQNetwork",
    "MultiAgentBatch",
    "MultiAgentRolloutWorker",
    "OffPolicyConfig",
    "OnDevice",
    "Operator",
    "OptimizerConfig",
    "ParallelIterator",
    "ParallelReplay",
    "ParallelRollouts",
    "Placement",
    "PolicyWorkers",
    "PrioritizedReplayBuffer",
    "Producer",
    "ProducerError",
    "Program",
    "RayProgram",
    "ReplayBatch",
    "ReplayRows",
    "ReplayShard",
    "ReplayShards",
    "ReplaySource",
    "ReportMetrics",
    "RolloutConfig",
    "RolloutWorker",
    "RunHooks",
    "SampleBatch",
    "SampleTiming",
    "SelectExperiences",
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
    "WorkerHooks",
    "WorkerSet",
    "WorkerSpec",
    "bulk_sync_env_steps",
    "encode_fragment",
    "encode_stacks",
    "evaluate_policy",
    "flat_batch",
    "from_actors",
    "from_items",
    "from_iterator",
    "get_algorithm",
    "jax_actor",
    "list_algorithms",
    "make_config",
    "make_optimizer",
    "make_vector_envs",
    "on_policy_flow",
    "param",
    "q_network",
    "register_algorithm",
    "register_model",
    "replace_config",
    "replay_in_driver",
    "require",
    "round_robin_weights",
    "standardize_fields",
    "train",
    "train_arrays",
]


_SUBMODULES = ("tune",)
"""Parts used by their own name, ``jaxflow.tune.trainable("PPO")``: imported (with Ray Tune) on first use."""

__getattr__, __dir__ = lazy_exports(__name__, _NAMES_BY_PART, globals(), _SUBMODULES)


if TYPE_CHECKING:
    from jaxflow import tune as tune  # not in __all__: `from jaxflow import *` loads no Ray Tune
    from jaxflow.api import (
        Algorithm,
        AlgorithmSpec,
        Callbacks,
        CheckpointError,
        LearnerHooks,
        Program,
        RayProgram,
        RunHooks,
        WorkerHooks,
        get_algorithm,
        list_algorithms,
        register_algorithm,
        train,
    )
    from jaxflow.config import (
        NON_NEGATIVE,
        POSITIVE,
        UNIT,
        CommonConfig,
        ConfigError,
        DeviceConfig,
        OffPolicyConfig,
        OptimizerConfig,
        RolloutConfig,
        make_config,
        param,
        replace_config,
        require,
    )
    from jaxflow.dataflow import (
        NOT_READY,
        ActorPlacementError,
        ActorPool,
        BackpressureError,
        Concurrently,
        FlowContext,
        LocalIterator,
        Operator,
        ParallelIterator,
        Placement,
        Producer,
        ProducerError,
        WorkerError,
        from_actors,
        from_items,
        from_iterator,
        jax_actor,
    )
    from jaxflow.learn import (
        DeviceBatch,
        Learner,
        LearnerThread,
        LearnerThreadError,
        ToDevice,
        ToDeviceError,
        TrainState,
        make_optimizer,
    )
    from jaxflow.networks import MLPActorCritic, MLPQNetwork, q_network, register_model
    from jaxflow.ondevice import AnakinState, DeviceProgram, DeviceReplay, DeviceSpec, OnDevice, flat_batch
    from jaxflow.ops import (
        ApplyGradients,
        BroadcastWeights,
        ComputeGradients,
        ConcatBatches,
        Context,
        CountPolicyUpdates,
        Dequeue,
        Enqueue,
        ParallelReplay,
        ParallelRollouts,
        PolicyWorkers,
        ReportMetrics,
        SelectExperiences,
        StandardizeFields,
        StoreToReplay,
        TrainOneStep,
        UpdatePriorities,
        UpdateTargetNetwork,
        UpdateWorkerWeights,
        bulk_sync_env_steps,
        on_policy_flow,
        round_robin_weights,
        standardize_fields,
    )
    from jaxflow.replay import (
        LocalReplay,
        PrioritizedReplayBuffer,
        ReplayBatch,
        ReplayRows,
        ReplayShard,
        ReplayShards,
        ReplaySource,
        SumTree,
        encode_fragment,
        encode_stacks,
        replay_in_driver,
    )
    from jaxflow.rollout import (
        PER_ENV_FIELDS,
        Batch,
        EpisodeEnd,
        HostPostprocess,
        MultiAgentBatch,
        MultiAgentRolloutWorker,
        RolloutWorker,
        SampleBatch,
        SampleTiming,
        WorkerCrashedError,
        WorkerSet,
        WorkerSpec,
        evaluate_policy,
        make_vector_envs,
        train_arrays,
    )
