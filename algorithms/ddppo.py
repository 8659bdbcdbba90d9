"""DD-PPO: decentralized distributed PPO (Wijmans et al., 2020, "DD-PPO: Learning
Near-Perfect PointGoal Navigators from 2.5 Billion Frames").

No central learner: each of the ``num_workers`` members is a rollout worker and a process
of one JAX multi-process runtime (:mod:`jaxflow.dataflow.jax_process`). Every iteration
each member samples its share of the batch, computes GAE and standardizes its advantages
on its own samples, and runs PPO's update (PPO's loss, epochs and minibatches) on a mesh of
all members' devices, and every member ends with the same parameters, which its own worker
acts with next. On accelerators its rows stay in its process and only the gradients are
all-reduced across members; on CPUs, where gloo reduces each array in a round trip of its
own, the batch is gathered onto every member once per update and each computes every
minibatch (``jaxflow.learn.sgd.default_shuffle_devices``). The driver sends nothing but "step" and gets back metrics and
episode statistics; weights leave the members only for checkpoints and evaluation. A
member's failure ends the run (the runtime cannot shrink); resume it from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import numpy as np
import ray

from jaxflow import AlgorithmSpec, LearnerHooks, ReportMetrics, RunHooks, from_iterator, register_algorithm
from jaxflow import envs as jf_envs
from jaxflow.algorithms.a2c import postprocess
from jaxflow.algorithms.ppo import PPOConfig, loss
from jaxflow.api.ray_program import init_ray, learner_factory
from jaxflow.config.constants import ENV_STEPS_SAMPLED
from jaxflow.config.fields import require
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.dataflow.jax_process import host, start_jax_processes
from jaxflow.learn.learner import Learner
from jaxflow.ops.metrics import Context
from jaxflow.ops.rollout_ops import bulk_sync_env_steps, standardize_fields
from jaxflow.ops.train_ops import record_update
from jaxflow.policies.policy import Policy
from jaxflow.rollout.batch import concat_batches
from jaxflow.rollout.evaluation import evaluate_policy
from jaxflow.rollout.worker import RolloutWorker, WorkerSpec
from jaxflow.rollout.worker_set import worker_placement


@dataclasses.dataclass(frozen=True)
class DDPPOConfig(PPOConfig):
    """PPO's settings, read per member: ``num_workers`` members, each sampling whole
    fragments until it has its share of ``train_batch_size``; ``minibatch_size`` is the
    global minibatch, split over the members."""

    learner_group = False  # no learners: the workers learn
    recurrent_modes: ClassVar[tuple[str, ...]] = ()  # its members step feed-forward policies

    def __post_init__(self) -> None:
        super().__post_init__()
        name, r = type(self).__name__, self.rollout
        require(r.num_workers >= 1, f"{name}.num_workers must be >= 1: the workers are DD-PPO's members.")
        require(
            not (r.normalize_observations or r.scale_rewards),
            f"{name}: normalize_observations and scale_rewards are not supported (each member would keep its own statistics).",
        )


def fragments_per_member(config: DDPPOConfig) -> int:
    """Fragments each member samples per iteration: the whole rounds of ``bulk_sync_env_steps``."""
    r = config.rollout
    return bulk_sync_env_steps(config) // (r.num_workers * r.num_envs_per_worker * r.rollout_fragment_length)


class MemberStep(NamedTuple):
    """What a member sends the driver after an iteration: the update's metrics and its samples' account."""

    metrics: dict[str, Any]
    env_steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray


class DDPPOMember:
    """A rollout worker and a learner over all members' devices, in one process."""

    def __init__(
        self, config: DDPPOConfig, policy: Policy, make_learner: Callable[..., Learner], env_entry: Any, index: int
    ):
        self.learner = make_learner(devices=jax.devices())
        self.worker = RolloutWorker(WorkerSpec(config, policy, postprocess), index, env_entry=env_entry)
        self.worker.set_weights(self.learner.get_weights(), self.learner.version)
        self.fragments = fragments_per_member(config)

    def step(self) -> MemberStep:
        """Samples this member's share, updates with every member, acts with the result next."""
        batch = concat_batches([self.worker.sample() for _ in range(self.fragments)])
        metrics = self.learner.update(standardize_fields(batch.train_arrays(), ["advantages"]))
        self.worker.set_weights(self.learner.get_weights(), self.learner.version)
        return MemberStep(metrics, batch.env_steps, batch.episode_returns, batch.episode_lengths)

    def get_state(self) -> Any:
        return self.learner.get_state()

    def get_weights(self) -> Any:
        return self.learner.get_weights()

    def set_state(self, state: Any) -> None:
        self.learner.set_state(state)
        self.worker.set_weights(self.learner.get_weights(), self.learner.version)


class DDPPOProgram:
    """DD-PPO's members as a :class:`~jaxflow.api.program.Program` (the ``program`` hook).

    Example:
        >>> algo = Algorithm.build("DDPPO", num_workers=2)  # doctest: +SKIP
        >>> algo.train()["learner"]["policy_loss"]          # doctest: +SKIP
    """

    def __init__(self, config: DDPPOConfig, spec: AlgorithmSpec, mode: str):
        del mode  # Ray mode only
        self.config, self.files = config, None
        self.policy, make_learner = learner_factory(config, spec)
        init_ray()
        placement = worker_placement(config.rollout)
        count = config.rollout.num_workers
        placement.check_room(count, f"DD-PPO members (num_workers={count})")
        self.members, _ = start_jax_processes(count, placement.options())
        entry = jf_envs.custom_entry(config.env)
        host(self.members, functools.partial(DDPPOMember, config, self.policy, make_learner, entry))
        self.context = Context(num_episodes=config.metrics_num_episodes)
        self._results = ReportMetrics(from_iterator(self._steps, self.context, "DDPPO"), None)

    def _steps(self) -> Any:
        while True:
            steps = ray.get([m.call.remote("step") for m in self.members])
            for s in steps:
                self.context.counters[ENV_STEPS_SAMPLED] += s.env_steps
                self.context.record_episodes(s.episode_returns, s.episode_lengths)
            record_update(self.context, steps[0].metrics, sum(s.env_steps for s in steps))
            yield steps[0].metrics

    def results(self) -> LocalIterator[dict[str, Any]]:
        return self._results

    def get_state(self) -> Any:
        return ray.get(self.members[0].call.remote("get_state"))

    def set_state(self, state: Any) -> None:
        ref = ray.put(state)
        ray.get([m.call.remote("set_state", ref) for m in self.members])

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        del member  # one agent
        weights = ray.get(self.members[0].call.remote("get_weights"))
        return evaluate_policy(self.config, self.policy, weights, episodes, seed, None)

    def stop(self) -> None:
        self._results.stop()
        for m in self.members:
            ray.kill(m)


DDPPO = register_algorithm(
    AlgorithmSpec(
        "DDPPO",
        DDPPOConfig,
        loss,
        None,
        postprocess,
        learner=LearnerHooks(sgd=lambda c: (c.num_epochs, c.minibatch_size), train_batch_env_steps=bulk_sync_env_steps),
        run=RunHooks(program=DDPPOProgram, program_kinds=("gymnasium",)),
    )
)
