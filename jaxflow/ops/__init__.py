"""RL operators, the CapWords pieces plans are written in (RLlib Flow's vocabulary),
grouped by concern: rollout, train, replay, queue, report, multi-agent."""

from jaxflow.config.constants import (
    ENV_STEPS_SAMPLED,
    ENV_STEPS_TRAINED,
    NUM_UPDATES,
    NUM_WEIGHT_SYNCS,
    TRAINING_ITERATION,
)
from jaxflow.ops.metrics import Context, EpisodeWindow
from jaxflow.ops.multiagent_ops import (
    CountPolicyUpdates,
    PolicySlot,
    PolicyWorkers,
    SelectExperiences,
    on_policy_flow,
    round_robin_weights,
)
from jaxflow.ops.queue_ops import Dequeue, Enqueue
from jaxflow.ops.replay_ops import (
    REPLAY_ITEMS_DROPPED,
    REPLAY_ITEMS_STORED,
    ParallelReplay,
    StoreToReplay,
    UpdatePriorities,
)
from jaxflow.ops.report import ReportMetrics, results
from jaxflow.ops.rollout_ops import (
    ConcatBatches,
    ParallelRollouts,
    RecordSampled,
    StandardizeFields,
    bulk_sync_env_steps,
    standardize_fields,
)
from jaxflow.ops.train_ops import (
    NUM_TARGET_UPDATES,
    ApplyGradients,
    BroadcastWeights,
    ComputeGradients,
    TrainOneStep,
    UpdateTargetNetwork,
    UpdateWorkerWeights,
    record_update,
)

__all__ = [
    "ENV_STEPS_SAMPLED",
    "ENV_STEPS_TRAINED",
    "NUM_TARGET_UPDATES",
    "NUM_UPDATES",
    "NUM_WEIGHT_SYNCS",
    "REPLAY_ITEMS_DROPPED",
    "REPLAY_ITEMS_STORED",
    "TRAINING_ITERATION",
    "ApplyGradients",
    "BroadcastWeights",
    "ComputeGradients",
    "ConcatBatches",
    "Context",
    "CountPolicyUpdates",
    "Dequeue",
    "Enqueue",
    "EpisodeWindow",
    "ParallelReplay",
    "ParallelRollouts",
    "PolicySlot",
    "PolicyWorkers",
    "RecordSampled",
    "ReportMetrics",
    "SelectExperiences",
    "StandardizeFields",
    "StoreToReplay",
    "TrainOneStep",
    "UpdatePriorities",
    "UpdateTargetNetwork",
    "UpdateWorkerWeights",
    "bulk_sync_env_steps",
    "on_policy_flow",
    "record_update",
    "results",
    "round_robin_weights",
    "standardize_fields",
]
