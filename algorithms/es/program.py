"""An ES or ARS run in either mode, as :class:`~jaxflow.api.algorithm.Algorithm` drives it.

A generation: draw ``population_size / 2`` offsets into the noise table from the run's key,
play each perturbation and its mirror once, and move ``theta`` by the config's search
direction (:meth:`~jaxflow.algorithms.es.config.SearchConfig.search_direction`). Device mode
compiles ``iterations_per_call`` generations into one call, the population a ``vmap`` axis
split over the local devices. Ray mode puts the table into the object store once; each
generation the driver sends ``theta`` (one object-store copy) and a share of the offsets to
every :class:`~jaxflow.algorithms.es.rollouts.SearchWorker`, which answers with returns. The
workers are a :class:`~jaxflow.rollout.worker_set.WorkerSet`: a dead or silent one raises,
is dropped or is restarted as ``on_worker_failure`` says, and its share is played again by
a live one, to the same returns (:mod:`~jaxflow.algorithms.es.shares`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import ray
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxflow import AlgorithmSpec, ReportMetrics, from_iterator
from jaxflow import envs as jf_envs
from jaxflow.algorithms.es.config import SearchConfig
from jaxflow.algorithms.es.core import noise_table, perturbations, sample_offsets
from jaxflow.algorithms.es.rollouts import SearchSpec, SearchWorker, greedy_actor, merge_all, population_returns
from jaxflow.algorithms.es.shares import evaluate_shares
from jaxflow.api.ray_program import init_ray
from jaxflow.api.spaces import env_spaces
from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES
from jaxflow.config.fields import ConfigError, require
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.ops.metrics import Context
from jaxflow.rollout.evaluation import evaluate_policy
from jaxflow.rollout.normalize import Moments, Normalizer, moments_init, moments_merge
from jaxflow.rollout.worker_set import WorkerSet

Array = jax.Array
POPULATION_AXIS = "population"


class SearchState(NamedTuple):
    """Everything a run needs to continue: saved and restored as one pytree."""

    theta: Array
    """The flat parameters of the policy (the mean of the search distribution)."""
    opt_state: Any
    key: Array
    """Generation g draws its offsets and env keys from ``fold_in(key, g)``."""
    generation: Array
    obs: Moments
    """Every observation the perturbations acted on (used where ``normalize_observations``)."""


def generation_keys(key: Array, generation: Array) -> tuple[Array, Array]:
    """The keys of generation ``generation``'s offsets and of its episodes."""
    k = jax.random.split(jax.random.fold_in(key, generation))
    return k[0], k[1]


def population_mesh() -> Mesh:
    """The local devices as one axis, that device mode splits the population over."""
    return Mesh(np.asarray(jax.local_devices()), (POPULATION_AXIS,))


def update(config: SearchConfig, optimizer: Any, state: SearchState, noise: Array, returns: Array, moments: Moments):
    """One step of ``theta`` from a generation's returns (``[2n]``: the ``+`` members, then the
    ``-``), and the observation statistics merged; returns the state and the step's metrics."""
    n = noise.shape[0]
    grad = config.search_direction(returns[:n], returns[n:], noise, state.theta)
    updates, opt_state = optimizer.update(grad, state.opt_state, state.theta)
    theta = state.theta + updates
    obs = moments_merge(state.obs, moments)
    new = state._replace(theta=theta, opt_state=opt_state, generation=state.generation + 1, obs=obs)
    return new, {"grad_norm": jnp.linalg.norm(grad), "theta_norm": jnp.linalg.norm(theta)}


def resolve_search_mode(config: SearchConfig) -> str:
    """``"device"`` for a gymnax env (unless ``mode="ray"``), else ``"ray"``; a ``ConfigError``
    for device mode on another env, or for a population Ray mode's workers cannot share."""
    name, kind = type(config).__name__, jf_envs.entry(config.env).kind
    require(
        kind != "multiagent", f"{name}.env {config.env!r} is a multi-agent environment; ES and ARS train one agent."
    )
    if config.mode == "device":
        require(
            kind == "gymnax",
            f"{name}.mode='device' runs gymnax/<id> envs, not {config.env!r}. Allowed: 'ray' or 'auto'.",
        )
    mode = "device" if config.mode != "ray" and kind == "gymnax" else "ray"
    pairs, workers = config.population_size // 2, config.rollout.num_workers
    require(
        mode == "device" or (workers >= 1 and pairs % workers == 0),
        f"{name}: in Ray mode population_size / 2 ({pairs}) must be a multiple of num_workers ({workers}, at least 1).",
    )
    devices = jax.local_device_count()
    require(
        mode == "ray" or config.population_size % devices == 0,
        f"{name}.population_size ({config.population_size}) must be a multiple of the {devices} local devices "
        "that share it in device mode.",
    )
    return mode


class SearchProgram:
    """ES or ARS as a :class:`~jaxflow.api.program.Program` (the ``program`` hook).

    Example:
        >>> algo = Algorithm.build("ES", env="gymnax/CartPole-v1")  # doctest: +SKIP
        >>> algo.train()["population"]["return_mean"]              # doctest: +SKIP
    """

    def __init__(self, config: SearchConfig, spec: AlgorithmSpec, mode: str):
        del mode  # "auto" resolved here: device mode for gymnax envs
        self.config, self.mode = config, resolve_search_mode(config)
        self.policy = spec.policy(config, *env_spaces(config, spec))
        key = jax.random.PRNGKey(config.seed)
        theta, self.unravel = ravel_pytree(self.policy.init(key))
        self.dim = int(theta.size)
        require(
            config.noise_table_size >= self.dim,
            f"{type(config).__name__}.noise_table_size ({config.noise_table_size}) must be at least the policy's "
            f"{self.dim} parameters.",
        )
        self._optimizer = config.search_optimizer()
        obs = moments_init(self.policy.obs_shape, jnp)
        # Device mode's state lives where its compiled call leaves it (replicated over the
        # population's devices): placed elsewhere, the second call would compile it again.
        self._placement = None if self.mode == "ray" else NamedSharding(population_mesh(), PartitionSpec())
        start = SearchState(
            theta, self._optimizer.init(theta), jax.random.fold_in(key, 1), jnp.zeros((), jnp.int32), obs
        )
        self.state: SearchState = jax.device_put(start, self._placement)
        self.table = noise_table(config.noise_table_size)
        self._table = jax.device_put(self.table)
        self.context = Context(num_episodes=config.metrics_num_episodes)
        self.files = None  # everything is in the state
        self.workers: WorkerSet | None = None  # Ray mode's
        self._results: LocalIterator[dict[str, Any]] | None = None
        self._offsets = jax.jit(functools.partial(self._sample_offsets))
        # The table is an argument of the compiled calls: closed over, its 40 MB would be
        # compiled into them as a constant (a slower first call, 100 MB more memory).
        self._update = jax.jit(self._host_update)
        if self.mode == "ray":
            init_ray()
            # The table goes into the object store once (one copy per node, read there in place),
            # theta with every generation; a restarted worker reads the same table.
            built = SearchSpec(config, self.policy, ray.put(self.table))
            self.workers = WorkerSet(built, np.asarray(theta), 0, worker_cls=SearchWorker)
        else:
            self._run = jax.jit(self._generations, donate_argnums=0)

    def _norm(self, obs: Moments) -> Moments | None:
        return obs if self.config.rollout.normalize_observations else None

    def _sample_offsets(self, key: Array, generation: Array) -> Array:
        k, _ = generation_keys(key, generation)
        return sample_offsets(k, self.config.population_size // 2, self.config.noise_table_size, self.dim)

    def _generations(self, state: SearchState, table: Array) -> tuple[SearchState, dict[str, Array]]:
        env, env_params = jf_envs.make(self.config.env, **self.config.env_config)
        act = greedy_actor(self.policy, self.unravel)
        spread = NamedSharding(population_mesh(), PartitionSpec(POPULATION_AXIS))
        sigma, clip = self.config.noise_std, self.config.rollout.normalize_clip

        def generation(state: SearchState, _: Any):
            _, episode_key = generation_keys(state.key, state.generation)
            noise = perturbations(table, self._sample_offsets(state.key, state.generation), self.dim)
            thetas = jnp.concatenate([state.theta + sigma * noise, state.theta - sigma * noise])
            thetas = jax.lax.with_sharding_constraint(thetas, spread)  # each device plays its share
            returns, lengths, moments = population_returns(
                env, env_params, act, clip, thetas, self._norm(state.obs), episode_key, self.config.max_episode_length
            )
            state, out = update(self.config, self._optimizer, state, noise, returns, moments)
            return state, dict(out, returns=returns, lengths=lengths)

        return jax.lax.scan(generation, state, None, length=self.config.device.iterations_per_call)

    def _host_update(self, state: SearchState, table: Array, offsets: Array, returns: Array, moments: Moments):
        noise = perturbations(table, offsets, self.dim)
        return update(self.config, self._optimizer, state, noise, returns, moments)

    def ray_generation(self) -> dict[str, np.ndarray]:
        """Ray mode: one generation, its offsets shared out to the workers and their returns
        gathered (a failed worker's share played again: :mod:`~jaxflow.algorithms.es.shares`)."""
        offsets = np.asarray(self._offsets(self.state.key, self.state.generation))
        generation = int(self.state.generation)
        assert self.workers is not None  # Ray mode
        self.workers.sync_weights(np.asarray(self.state.theta), generation)
        outs = evaluate_shares(self.workers, offsets, generation, self._norm(jax.device_get(self.state.obs)))
        returns = np.concatenate([o["returns_pos"] for o in outs] + [o["returns_neg"] for o in outs])
        n = len(offsets) // len(outs)
        lengths = np.concatenate([o["lengths"][:n] for o in outs] + [o["lengths"][n:] for o in outs])
        moments = jax.tree.map(lambda x: np.asarray(x, np.float32), merge_all([o["moments"] for o in outs]))
        self.state, out = self._update(self.state, self._table, offsets, returns, moments)
        worker_s = max(o["seconds"] for o in outs)
        out = dict(jax.device_get(out), returns=returns, lengths=lengths, worker_s=worker_s)
        return jax.tree.map(lambda x: np.asarray(x)[None], out)

    def results(self) -> LocalIterator[dict[str, Any]]:
        """One result per compiled call of ``iterations_per_call`` generations (device mode)
        or per generation (Ray mode)."""
        if self._results is None:
            self._results = self._plan()
        return self._results

    def _plan(self) -> LocalIterator[dict[str, Any]]:
        def gen():
            while True:
                if self.mode == "ray":
                    out = self.ray_generation()
                else:
                    self.state, out = self._run(self.state, self._table)
                    out = jax.device_get(out)
                record(self.context, out)
                yield out

        per_item = 1 if self.mode == "ray" else self.config.device.iterations_per_call
        source = from_iterator(gen, self.context, type(self.config).__name__)
        return ReportMetrics(source, self.workers, self.config.min_env_steps_per_iteration, per_item)

    def get_state(self) -> SearchState:
        return jax.device_get(self.state)

    def set_state(self, state: SearchState) -> None:
        self.state = jax.device_put(state, self._placement)

    def get_weights(self, member: int = 0) -> Any:
        """The policy's parameters (the search distribution's mean)."""
        if member != 0:
            raise ConfigError(f"{type(self.config).__name__} trains one agent (member 0), not member {member}.")
        return jax.device_get(self.unravel(self.state.theta))

    def get_normalizer(self, member: int = 0) -> Normalizer | None:
        """The observation statistics the policy acts with (None where it acts on raw observations)."""
        del member
        norm = self._norm(jax.device_get(self.state.obs))
        return None if norm is None else Normalizer(norm, None)

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """The unperturbed policy, greedy, for ``episodes`` episodes on the host."""
        return evaluate_policy(
            self.config, self.policy, self.get_weights(member), episodes, seed, self.get_normalizer()
        )

    def stop(self) -> None:
        """Kills the Ray workers (Ray mode)."""
        if self.workers is not None:
            self.workers.stop()
            self.workers = None


def record(ctx: Context, out: dict[str, np.ndarray]) -> None:
    """Adds K generations' outputs (leading axis K) to the run's metrics: every episode, env
    steps, one update per generation, the last generation's statistics."""
    ctx.record_episodes(out["returns"].reshape(-1), out["lengths"].reshape(-1))
    steps = int(out["lengths"].sum())
    ctx.counters[ENV_STEPS_SAMPLED] += steps
    ctx.counters[ENV_STEPS_TRAINED] += steps
    ctx.counters[NUM_UPDATES] += len(out["lengths"])
    last = np.asarray(out["returns"][-1], np.float64)
    ctx.info["learner"] = {k: float(out[k][-1]) for k in ("grad_norm", "theta_norm")}
    ctx.info["population"] = {"return_mean": float(last.mean()), "return_max": float(last.max())}
    if "worker_s" in out:  # Ray mode: the slowest worker's own seconds for its share of the generation
        ctx.info["population"]["worker_s"] = float(out["worker_s"][-1])
