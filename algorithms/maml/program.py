"""A MAML run, as one program: everything compiled on the device (``mode="device"``), or Ray
actors on CPUs that collect and adapt, each for its share of the tasks, and a driver that
takes the meta-gradient (``mode="ray"``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import ray

from jaxflow import AlgorithmSpec, ReportMetrics, envs, from_iterator
from jaxflow.algorithms.maml.config import MAMLConfig
from jaxflow.algorithms.maml.losses import collect, collect_jit, evaluate_adaptation, meta_update, shard_key
from jaxflow.algorithms.maml.plan import plan, record
from jaxflow.api.ray_program import init_ray
from jaxflow.config.fields import ConfigError
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.learn.schedules import learner_optimizer
from jaxflow.learn.sgd import TrainState, make_optimizer
from jaxflow.ops.metrics import Context
from jaxflow.policies.policy import Policy
from jaxflow.rollout.evaluation import evaluation_seed
from jaxflow.rollout.normalize import refuse_normalization
from jaxflow.rollout.worker_set import jax_actor, worker_placement

Array = jax.Array


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
        self._collect = collect_jit(envs.make_task_distribution(config.env, **config.env_config), policy.apply, config)
        self._params: Any = None
        self._key: Array | None = None

    def set_meta_params(self, params: Any, key: np.ndarray, iteration: int) -> None:
        self._params, self._key = params, shard_key(key, iteration, self.index)

    def sample(self) -> dict[str, Any]:
        return jax.device_get(self._collect(self._params, self._key, num_tasks=self._num_tasks))


class MAMLProgram:
    """A MAML run as :class:`~jaxflow.api.algorithm.Algorithm` drives it (the ``program`` hook).

    Example:
        >>> algo = Algorithm.build("MAML", env="tasks/PointNavigation-v0")  # doctest: +SKIP
        >>> algo.train()["maml"]["adaptation_gain"]                       # doctest: +SKIP
    """

    def __init__(self, config: MAMLConfig, spec: AlgorithmSpec, mode: str):
        self.config, self.mode = config, "ray" if mode == "ray" else "device"
        refuse_normalization(config, "in MAML")
        self.dist = envs.make_task_distribution(config.env, **config.env_config)
        obs_space = gymnasium.spaces.Box(-np.inf, np.inf, self.dist.obs_shape, np.float32)
        self.policy = spec.policy(config, obs_space, gymnasium.spaces.Discrete(self.dist.num_actions))
        assert spec.loss is not None, "MAML's spec carries its meta-loss"
        self._loss = functools.partial(spec.loss, apply_fn=self.policy.apply, config=config)
        self._optimizer = learner_optimizer(make_optimizer, config)
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
                jax_actor(MAMLWorker, **worker_placement(config.rollout).options()).remote(config, self.policy, i)
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
        seed = evaluation_seed(self.config, seed)
        return evaluate_adaptation(self.collect, self.get_weights(member), jax.random.PRNGKey(seed), episodes)

    def stop(self) -> None:
        """Kills the Ray actors (Ray mode)."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []
