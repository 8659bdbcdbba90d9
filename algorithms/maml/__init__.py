"""MAML: model-agnostic meta-learning with a policy-gradient inner loop (Finn, Abbeel &
Levine, 2017, "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks",
Section 3.2 and Algorithm 3), for discrete-action policies on a distribution of JAX tasks
(see :mod:`envs.tasks`).

A meta-iteration: draw ``meta_batch_size`` tasks; in each, sample ``episodes_per_task``
episodes with the meta-parameters theta, take ``inner_steps`` plain SGD steps of the
vanilla policy-gradient loss on them (theta'_i), sample as many episodes with theta'_i;
then one Adam step on the mean over tasks of the policy-gradient loss of the second
episodes at theta'_i, differentiated through the inner step (second order; no finite
differences). The paper's outer optimizer is TRPO; here it is Adam on that loss.

Either everything runs on the device as one compiled function (``mode="device"``, the
default for these JAX tasks), or Ray actors on CPUs collect and adapt, each for its share
of the tasks, and the driver takes the meta-gradient (``mode="ray"``). Both draw the same
tasks and episodes from the same keys: with one worker, Ray mode repeats device mode.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import ray

from jaxflow import AlgorithmSpec, CommonConfig, ReportMetrics, RunHooks, from_actors, from_iterator, register_algorithm
from jaxflow.algorithms.maml.losses import (
    adapt,
    collect,
    collect_jit,
    evaluate_adaptation,
    inner_loss,
    loss,
    meta_loss,
    meta_update,
    pg_advantages,
    pg_batch,
    reward_to_go,
    rollout_episodes,
    shard_key,
)
from jaxflow.api.ray_program import init_ray
from jaxflow.config import OptimizerConfig
from jaxflow.config.constants import EVALUATION_SEED_OFFSET
from jaxflow.config.fields import POSITIVE, ConfigError, param, require
from jaxflow.dataflow.iterators import LocalIterator, Operator
from jaxflow.envs.tasks import list_task_distributions, make_task_distribution
from jaxflow.learn.sgd import TrainState, make_optimizer
from jaxflow.ops.metrics import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES, Context
from jaxflow.policies.policy import Policy
from jaxflow.rollout.worker_set import jax_actor

Array = jax.Array

__all__ = [
    "MAML",
    "MAMLConfig",
    "MAMLProgram",
    "MAMLState",
    "adapt",
    "collect",
    "evaluate_adaptation",
    "inner_loss",
    "loss",
    "meta_loss",
    "meta_update",
    "pg_advantages",
    "pg_batch",
    "plan",
    "reward_to_go",
    "rollout_episodes",
    "shard_key",
]


@dataclasses.dataclass(frozen=True)
class MAMLConfig(CommonConfig):
    """MAML settings (plus :class:`~jaxflow.config.CommonConfig`; of its rollout fields only
    ``num_workers`` and ``num_cpus_per_worker`` apply, in Ray mode)."""

    on_policy = True

    env: str = "tasks/PointNavigation-v0"
    """Task distribution id, one of :func:`envs.tasks.list_task_distributions`; ``env_config``
    goes to its constructor (e.g. ``{"horizon": 50}``)."""
    meta_batch_size: int = param(20, POSITIVE)
    """Tasks per meta-iteration."""
    episodes_per_task: int = param(10, POSITIVE)
    """Episodes per task in each phase, before and after adaptation (at least 2: the baseline
    is the other episodes' mean)."""
    inner_lr: float = param(0.1, POSITIVE)
    """Step size alpha of the inner SGD steps."""
    inner_steps: int = param(1, POSITIVE)
    """Inner gradient steps, all on the pre-adaptation episodes."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=10.0))
    """The meta-update's Adam (see :class:`~jaxflow.config.OptimizerConfig`): learning rate beta
    1e-3, the meta-gradient clipped to global norm 10. In device mode ``iterations_per_call``
    counts meta-iterations (one result per call)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        ids = list_task_distributions()
        require(self.env in ids, f"{name}.env must be a task distribution, one of {ids}, got {self.env!r}.")
        try:
            make_task_distribution(self.env, **self.env_config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{name}.env_config {self.env_config!r} does not fit {self.env!r}: {e}") from e
        require(self.episodes_per_task >= 2, f"{name}.episodes_per_task must be >= 2, got {self.episodes_per_task}.")
        require(
            self.device.num_seeds == 1 and not self.device.sweep,
            f"{name}: MAML trains one agent; num_seeds and sweep are not supported.",
        )
        if self.mode == "ray":
            require(
                self.rollout.num_workers >= 1 and self.meta_batch_size % self.rollout.num_workers == 0,
                f"{name}: in Ray mode meta_batch_size ({self.meta_batch_size}) must be a multiple of "
                f"num_workers ({self.rollout.num_workers}, at least 1).",
            )


# --- the program: device mode, or Ray actors and a driver ------------------------------------


class MAMLState(NamedTuple):
    """Everything a run needs to continue, bit for bit: saved and restored as one pytree."""

    train: TrainState
    key: Array
    """Base key of task and episode sampling; meta-iteration i draws from :func:`shard_key`."""
    iteration: Array
    """Meta-iterations done (int32 scalar)."""


class MAMLWorker:
    """A CPU actor that collects one shard of every meta-batch: its own
    ``meta_batch_size / num_workers`` tasks, adapted to locally."""

    def __init__(self, config: MAMLConfig, policy: Policy, index: int):
        self.index, self._num_tasks = index, config.meta_batch_size // config.rollout.num_workers
        self._collect = collect_jit(make_task_distribution(config.env, **config.env_config), policy.apply, config)
        self._params: Any = None
        self._key: Array | None = None

    def set_meta_params(self, params: Any, key: np.ndarray, iteration: int) -> None:
        self._params, self._key = params, shard_key(key, iteration, self.index)

    def sample(self) -> dict[str, Any]:
        return jax.device_get(self._collect(self._params, self._key, num_tasks=self._num_tasks))


def record(ctx: Context, out: Mapping[str, np.ndarray]) -> None:
    """Adds K meta-iterations' outputs (leading axis K) to the plan's metrics: post-adaptation
    episodes, env steps (pre and post), meta-updates, the last iteration's statistics."""
    ctx.record_episodes(out["episode_returns"].reshape(-1), out["episode_lengths"].reshape(-1))
    steps = int(out["env_steps"].sum())
    ctx.counters[ENV_STEPS_SAMPLED] += steps
    ctx.counters[ENV_STEPS_TRAINED] += steps
    ctx.counters[NUM_UPDATES] += len(out["env_steps"])
    pre, post = float(out["pre_adaptation_return"][-1]), float(out["post_adaptation_return"][-1])
    ctx.info["learner"] = {k: float(out[k][-1]) for k in ("loss", "grad_norm", "entropy", "inner_step_norm")}
    ctx.info["maml"] = {"pre_adaptation_return": pre, "post_adaptation_return": post, "adaptation_gain": post - pre}


class MetaUpdate(Operator):
    """The driver's meta-update on a round of worker shards (concatenated along tasks)."""

    def __init__(self, program: MAMLProgram):
        self.program = program

    def __call__(self, shards: list[dict[str, Any]], ctx: Context) -> dict[str, np.ndarray]:
        out = self.program.update(jax.tree.map(lambda *xs: np.concatenate(xs), *shards))
        record(ctx, jax.tree.map(lambda x: np.asarray(x)[None], out))
        return out


class BroadcastMetaParams(Operator):
    """The new meta-parameters and the next round's key to every worker."""

    def __init__(self, program: MAMLProgram):
        self.program = program

    def __call__(self, item: Any, ctx: Context) -> Any:
        self.program.broadcast()
        return item


def plan(workers: list[Any], program: MAMLProgram, config: MAMLConfig) -> LocalIterator[dict[str, Any]]:
    """Ray mode's dataflow (built by :class:`MAMLProgram`, not by the Algorithm's learner path)."""
    # (1) a round: each worker draws its tasks, samples with theta, adapts per task, samples with theta'
    rounds = (
        from_actors(workers, "sample", program.context, config.rollout.worker_timeout_s)
        .gather_sync()
        .batch(len(workers))
    )
    # (2) the meta-gradient through the inner step on the driver, then theta to every worker
    train = rounds.for_each(MetaUpdate(program)).for_each(BroadcastMetaParams(program))
    return ReportMetrics(train, None, config.min_env_steps_per_iteration)


class MAMLProgram:
    """A MAML run as :class:`~jaxflow.api.algorithm.Algorithm` drives it (the ``program`` hook).

    Example:
        >>> algo = Algorithm.build("MAML", env="tasks/PointNavigation-v0")  # doctest: +SKIP
        >>> algo.train()["maml"]["adaptation_gain"]                       # doctest: +SKIP
    """

    def __init__(self, config: MAMLConfig, spec: AlgorithmSpec, mode: str):
        self.config, self.mode = config, "ray" if mode == "ray" else "device"
        self.dist = make_task_distribution(config.env, **config.env_config)
        obs_space = gymnasium.spaces.Box(-np.inf, np.inf, self.dist.obs_shape, np.float32)
        self.policy = spec.policy(config, obs_space, gymnasium.spaces.Discrete(self.dist.num_actions))
        assert spec.loss is not None, "MAML's spec carries its meta-loss"
        self._loss = functools.partial(spec.loss, apply_fn=self.policy.apply, config=config)
        self._optimizer = make_optimizer(config.optimizer.lr, config.optimizer.max_grad_norm)
        key = jax.random.PRNGKey(config.seed)
        params = self.policy.init(key)
        train = TrainState.create(params, self._optimizer, key)
        self.state = MAMLState(train, jax.random.fold_in(key, 1), jnp.zeros((), jnp.int32))
        self.context = Context(num_episodes=config.metrics_num_episodes)
        self._results: LocalIterator[dict[str, Any]] | None = None
        self._update = jax.jit(functools.partial(meta_update, self._loss, self._optimizer), donate_argnums=0)
        self.collect = collect_jit(self.dist, self.policy.apply, config)
        """Compiled :func:`collect` of this run's tasks, network and config (evaluation)."""
        self.workers: list[Any] = []
        self.files = None  # everything is in the state
        if self.mode == "ray":
            init_ray()
            self.workers = [
                jax_actor(MAMLWorker, num_cpus=config.rollout.num_cpus_per_worker).remote(config, self.policy, i)
                for i in range(config.rollout.num_workers)
            ]
            self.broadcast()
        else:
            self._run = jax.jit(self._iterations, donate_argnums=0)

    def _iterations(self, state: MAMLState) -> tuple[MAMLState, dict[str, Array]]:
        collect_fn = functools.partial(collect, self.dist, self.policy.apply, self.config)

        def iteration(state: MAMLState, _: Any):
            batch = collect_fn(
                state.train.params, shard_key(state.key, state.iteration, 0), self.config.meta_batch_size
            )
            train, out = meta_update(self._loss, self._optimizer, state.train, batch)
            return state._replace(train=train, iteration=state.iteration + 1), out

        return jax.lax.scan(iteration, state, None, length=self.config.device.iterations_per_call)

    def update(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Ray mode: one meta-update on a collected meta-batch."""
        train, out = self._update(self.state.train, batch)
        self.state = self.state._replace(train=train, iteration=self.state.iteration + 1)
        return jax.device_get(out)

    def broadcast(self) -> None:
        """Ray mode: theta and the next meta-iteration's key to every worker (one object-store copy)."""
        params = ray.put(self.get_weights())
        key, iteration = np.asarray(self.state.key), int(self.state.iteration)
        ray.get([w.set_meta_params.remote(params, key, iteration) for w in self.workers])

    def results(self) -> LocalIterator[dict[str, Any]]:
        """One result per compiled call of ``iterations_per_call`` meta-iterations (device
        mode) or per meta-iteration (Ray mode)."""
        if self._results is None:
            self._results = self._plan()
        return self._results

    def _plan(self) -> LocalIterator[dict[str, Any]]:
        if self.mode == "ray":
            return plan(self.workers, self, self.config)

        def gen():
            while True:
                self.state, out = self._run(self.state)
                out = jax.device_get(out)
                record(self.context, out)
                yield out

        source = from_iterator(gen, self.context, "MAML")
        return ReportMetrics(
            source, None, self.config.min_env_steps_per_iteration, self.config.device.iterations_per_call
        )

    def get_state(self) -> MAMLState:
        return jax.device_get(self.state)

    def set_state(self, state: MAMLState) -> None:
        self.state = jax.device_put(state)
        if self.workers:
            self.broadcast()

    def get_weights(self, member: int = 0) -> Any:
        if member != 0:
            raise ConfigError(f"MAML trains one agent (member 0), not member {member}.")
        return jax.tree.map(np.asarray, jax.device_get(self.state.train.params))

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Adaptation to ``episodes`` held-out tasks (drawn from ``seed``, by default a seed
        apart from training's): see :func:`evaluate_adaptation`."""
        seed = self.config.seed + EVALUATION_SEED_OFFSET if seed is None else seed
        return evaluate_adaptation(self.collect, self.get_weights(member), jax.random.PRNGKey(seed), episodes)

    def stop(self) -> None:
        """Kills the Ray actors (Ray mode)."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []


MAML = register_algorithm(AlgorithmSpec("MAML", MAMLConfig, loss, plan, run=RunHooks(program=MAMLProgram)))
