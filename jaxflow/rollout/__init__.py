"""Rollouts: batches, rollout workers (single- and multi-agent) and the worker set."""

from jaxflow.rollout.batch import (
    PER_ENV_FIELDS,
    Batch,
    GradientsResult,
    SampleBatch,
    SampleTiming,
    concat_batches,
    flatten_time_major,
    sum_timings,
    train_arrays,
)
from jaxflow.rollout.episode_hooks import EpisodeEnd
from jaxflow.rollout.evaluation import evaluate_policies, evaluate_policy, evaluation_seed, summarize_returns
from jaxflow.rollout.guards import DivergenceError, EnvValueError, PolicyOutputError
from jaxflow.rollout.multiagent import MultiAgentBatch, MultiAgentRolloutWorker, MultiAgentWorkerSpec
from jaxflow.rollout.normalize import HostNormalizer, Moments, Normalizer
from jaxflow.rollout.postprocess import HostPostprocess, example_train_batch
from jaxflow.rollout.sample_ahead import SampleAhead
from jaxflow.rollout.stepping import Stopwatch, make_vector_envs, vector_backend
from jaxflow.rollout.truncation import bootstrap_truncations, truncation_bootstrap
from jaxflow.rollout.worker import Rollout, RolloutWorker, WorkerSpec
from jaxflow.rollout.worker_set import WorkerCrashedError, WorkerSet

__all__ = [
    "PER_ENV_FIELDS",
    "Batch",
    "DivergenceError",
    "EnvValueError",
    "EpisodeEnd",
    "GradientsResult",
    "HostNormalizer",
    "HostPostprocess",
    "Moments",
    "MultiAgentBatch",
    "MultiAgentRolloutWorker",
    "MultiAgentWorkerSpec",
    "Normalizer",
    "PolicyOutputError",
    "Rollout",
    "RolloutWorker",
    "SampleAhead",
    "SampleBatch",
    "SampleTiming",
    "Stopwatch",
    "WorkerCrashedError",
    "WorkerSet",
    "WorkerSpec",
    "bootstrap_truncations",
    "concat_batches",
    "evaluate_policies",
    "evaluate_policy",
    "evaluation_seed",
    "example_train_batch",
    "flatten_time_major",
    "make_vector_envs",
    "sum_timings",
    "summarize_returns",
    "train_arrays",
    "truncation_bootstrap",
    "vector_backend",
]
