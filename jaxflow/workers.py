"""Rollout workers (Ray actors on CPUs) and the worker set that creates, checks and restarts them."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import ray

import envs
from jaxflow.config import ConfigError
from jaxflow.iterators import _call
from jaxflow.networks import forward_packed
from jaxflow.replay import ReplayRows

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 180.0


def jax_actor(cls: type, num_gpus: float = 0.0, **options: Any) -> Any:
    """``ray.remote(cls)`` with ``options``, for an actor that computes with JAX: on the CPU,
    or with ``num_gpus > 0`` on the (share of a) GPU Ray assigns it.

    A CPU actor's process starts with ``JAX_PLATFORMS=cpu``. Unpickling the actor imports
    jaxflow and with it gymnax, which builds JAX arrays at import, so the platform must be
    chosen before the process runs any Python of ours: on a GPU machine JAX's CUDA plugin
    otherwise claims the GPU in every actor, or fails there ("no supported devices found for
    platform CUDA"). A GPU actor allocates GPU memory as it needs it rather than JAX's
    default 75% of the GPU, since actors share a GPU with each other and with the learner.

    Example:
        >>> worker = jax_actor(RolloutWorker, num_cpus=1).remote(spec, 0)  # doctest: +SKIP
    """
    env_vars = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if num_gpus > 0 else {"JAX_PLATFORMS": "cpu"}
    return ray.remote(cls).options(runtime_env={"env_vars": env_vars}, num_gpus=num_gpus, **options)


class HostPostprocess:
    """A worker's ``postprocess(traj) -> dict`` compiled for the host CPU, with the fields it
    only passes through (the observations, most of a fragment's bytes) kept out of the
    compiled call and returned as the very same host arrays.

    A compiled call copies its numpy inputs in and its outputs out. For a fragment of 32
    steps of 128 Atari games that is 115 MB of observations each way: measured 0.14-0.35 s
    on the 2-core CI machine, and about 0.1 s on the H100 machine, on its CPU or through its
    GPU, against 0.6-1.0 s to sample the fragment there. The first fragment of each shape is
    traced once (``jax.make_jaxpr``) to find the outputs that are inputs unchanged and the
    inputs no computation reads; only the rest is compiled and called. That runs on the CPU
    whatever the default device, so a worker acting on a GPU share does not send even the
    small fields there and back.

    Example:
        >>> pp = HostPostprocess(lambda t: {"obs": t["obs"], "r2": 2 * t["r"]})
        >>> traj = {"obs": np.zeros((2, 84, 84), np.uint8), "r": np.ones(2, np.float32)}
        >>> out = pp(traj)
        >>> out["obs"] is traj["obs"], out["r2"].tolist()
        (True, [2.0, 2.0])
    """

    def __init__(self, fn: Callable[[dict[str, Any]], dict[str, Any]]):
        self._fn = fn
        self._cpu = jax.local_devices(backend="cpu")[0]
        self._plans: dict[Any, tuple[Callable[..., Any], list[str], dict[str, str], list[str]]] = {}

    def _plan(self, traj: dict[str, Any]) -> tuple[Callable[..., Any], list[str], dict[str, str], list[str]]:
        names = sorted(traj)
        key = tuple((k, np.shape(traj[k]), np.result_type(traj[k])) for k in names)
        if key in self._plans:
            return self._plans[key]
        closed, out_shapes = jax.make_jaxpr(lambda *xs: self._fn(dict(zip(names, xs))), return_shape=True)(
            *(traj[k] for k in names)
        )
        invars, outvars = closed.jaxpr.invars, closed.jaxpr.outvars
        if not isinstance(out_shapes, dict) or not all(isinstance(v, jax.ShapeDtypeStruct) for v in out_shapes.values()):
            raise TypeError(f"postprocess must return a flat dict of arrays, got {jax.tree.structure(out_shapes)}")
        out_names = sorted(out_shapes)  # a dict's leaves come in sorted key order
        source = {id(v): k for k, v in zip(names, invars)}
        forwarded: dict[str, str] = {}
        for out, var in zip(out_names, outvars):
            src = source.get(id(var))
            # Only where the compiled call would return the same array (no dtype conversion).
            if src is not None and np.result_type(traj[src]) == out_shapes[out].dtype:
                forwarded[out] = src
        computed = [k for k in out_names if k not in forwarded]
        read = {id(v) for eqn in closed.jaxpr.eqns for v in eqn.invars}
        read |= {id(v) for out, v in zip(out_names, outvars) if out in computed}
        needed = [k for k, v in zip(names, invars) if id(v) in read]
        skipped = {k: jax.ShapeDtypeStruct(np.shape(traj[k]), np.result_type(traj[k])) for k in names if k not in needed}

        def compute(inputs: dict[str, Any]) -> dict[str, Any]:
            # The skipped inputs are read by nothing computed here; XLA drops these zeros.
            full = dict(inputs, **{k: jnp.zeros(s.shape, s.dtype) for k, s in skipped.items()})
            out = self._fn(full)
            return {k: out[k] for k in computed}

        self._plans[key] = plan = (jax.jit(compute), needed, forwarded, out_names)
        return plan

    def __call__(self, traj: dict[str, Any]) -> dict[str, Any]:
        compute, needed, forwarded, order = self._plan(traj)
        with jax.default_device(self._cpu):
            out = jax.device_get(compute({k: traj[k] for k in needed}))
        out.update((k, traj[src]) for k, src in forwarded.items())
        return {k: out[k] for k in order}


class SampleBatch(NamedTuple):
    """A time-major trajectory fragment ``data[name]: [T, B, ...]`` and what came with it.

    With an ``encode`` step in the :class:`WorkerSpec`, ``data`` is what that returns
    instead (replay rows for DQN and Ape-X, see :class:`~jaxflow.replay.ReplayRows`).
    """

    data: Any
    env_steps: int
    episode_returns: np.ndarray
    """Returns of the episodes that ended inside this fragment."""
    episode_lengths: np.ndarray
    weights_version: int
    """Learner version of the weights that acted."""
    timing: "SampleTiming | None" = None
    """Where the worker's time went while it sampled this fragment (None where not measured)."""


class SampleTiming(NamedTuple):
    """Seconds a rollout worker spent producing fragments: in all (``sample_s``, from the
    call to the returned fragment, postprocessing included), of which stepping the
    environments (``env_s``) and waiting for the policy's forward passes (``policy_s``);
    the rest is the worker's own bookkeeping."""

    sample_s: float
    env_s: float
    policy_s: float


class Stopwatch:
    """Adds up the seconds spent inside ``with`` blocks: a worker's time in its envs and in
    waits for the policy, for :class:`SampleTiming`.

    Example:
        >>> env_watch = Stopwatch()
        >>> with env_watch:
        ...     step = env.step(actions)  # doctest: +SKIP
        >>> env_watch.seconds  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> "Stopwatch":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds += time.perf_counter() - self._start


PER_ENV_FIELDS = ("last_obs", "bootstrap_value")
"""Fragment fields with one entry per environment (``[B, ...]``), not per step (``[T, B, ...]``)."""


def concat_batches(batches: Sequence[SampleBatch]) -> SampleBatch:
    """Concatenates fragments of equal length T along the batch axis (a multi-agent batch
    joins policy by policy)."""
    if len(batches) == 1:
        return batches[0]
    if not isinstance(batches[0], SampleBatch):
        return type(batches[0]).concat(batches)
    if isinstance(batches[0].data, ReplayRows):
        data: Any = ReplayRows.concatenate([b.data for b in batches])
    else:
        data = {k: np.concatenate([b.data[k] for b in batches], axis=0 if k in PER_ENV_FIELDS else 1) for k in batches[0].data}
    return SampleBatch(
        data,
        sum(b.env_steps for b in batches),
        np.concatenate([b.episode_returns for b in batches]),
        np.concatenate([b.episode_lengths for b in batches]),
        min(b.weights_version for b in batches),
        sum_timings([b.timing for b in batches]),
    )


def sum_timings(timings: Sequence[SampleTiming | None]) -> SampleTiming | None:
    """The sum of the measured timings, None if none was measured."""
    measured = [t for t in timings if t is not None]
    return SampleTiming(*map(sum, zip(*measured))) if measured else None


def flatten_time_major(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``[T, B, ...] -> [T * B, ...]`` for every field (a view, no copy)."""
    return {k: v.reshape((-1,) + v.shape[2:]) for k, v in data.items()}


def example_train_batch(spec: "WorkerSpec", obs_space: Any, num_actions: int, env_steps: int) -> dict[str, np.ndarray]:
    """Zeros shaped like a flat train batch of ``env_steps`` postprocessed samples, found
    by tracing ``postprocess`` abstractly over the shapes ``RolloutWorker.sample`` returns."""
    cfg = spec.config
    T, B = cfg.rollout_fragment_length, cfg.num_envs_per_worker

    def tb(*shape: int, dtype: Any = np.float32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((T, B) + shape, dtype)

    traj = dict(
        obs=tb(*obs_space.shape, dtype=envs.vector.obs_dtype(obs_space)), actions=tb(dtype=np.int32), logp=tb(),
        logits=tb(num_actions), values=tb(), rewards=tb(), discounts=tb(),
        bootstrap_value=jax.ShapeDtypeStruct((B,), np.float32),
        last_obs=jax.ShapeDtypeStruct((B,) + obs_space.shape, envs.vector.obs_dtype(obs_space)),
    )
    if spec.postprocess is not None:
        traj = jax.eval_shape(functools.partial(spec.postprocess, config=cfg), traj)
    return {k: np.zeros((env_steps,) + v.shape[2:], v.dtype) for k, v in traj.items() if len(v.shape) >= 2}


class GradientsResult(NamedTuple):
    """Gradients a worker computed on its own fragment (A3C), plus the fragment's statistics."""

    grads: Any
    metrics: dict[str, float]
    env_steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    weights_version: int
    timing: SampleTiming | None = None
    """The worker's time sampling the fragment (not computing its gradients)."""


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """What a rollout worker needs: the algorithm's config, network and pure functions.

    ``postprocess(traj, config) -> traj`` runs on the worker after sampling (e.g. GAE),
    compiled for the CPU with the fields it passes through kept out (:class:`HostPostprocess`);
    ``encode(traj, config)`` then runs in numpy on the host (e.g. packing replay rows);
    ``loss(params, batch, rng, *, apply_fn, config)`` lets it compute gradients (A3C);
    ``explore(rng, logits, config, worker_index, env_steps) -> (actions, logp)`` picks
    actions from the network's first output (default: sample the softmax; DQN:
    epsilon-greedy on Q-values).
    """

    config: Any
    network: Any
    postprocess: Callable[..., Any] | None = None
    loss: Callable[..., Any] | None = None
    encode: Callable[..., Any] | None = None
    explore: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None


def make_vector_envs(config: Any, seed: int, index: int = 0, incarnation: int = 0, num_groups: int | None = None) -> list[Any]:
    """The vectors of environments a rollout worker of ``config`` steps: ``num_groups``
    (default ``config.num_env_groups``) groups splitting ``num_envs_per_worker`` envs, whose
    env ``i`` is seeded ``seed + i`` however they are grouped. ``vector_env="ale"`` runs
    ale-py's emulators in ``num_cpus_per_worker`` threads (at least one) per group; anything
    else steps gymnasium envs in the worker's own thread."""
    groups = config.num_env_groups if num_groups is None else num_groups
    n = config.num_envs_per_worker // groups
    if config.vector_env == "ale":
        threads = max(1, int(config.num_cpus_per_worker))
        return [envs.ALEVectorEnv(config.env, n, seed + g * n, config.env_config, index, incarnation, threads) for g in range(groups)]
    return [envs.VectorEnv(config.env, n, seed + g * n, config.env_config, index, incarnation) for g in range(groups)]


class Rollout(NamedTuple):
    """A fragment as stepped, before the postprocess: what :class:`SampleBatch` is made of."""

    traj: dict[str, np.ndarray]
    env_steps: int
    returns: np.ndarray
    lengths: np.ndarray
    version: int
    timing: SampleTiming


class SampleAhead:
    """Runs ``rollout`` in a background thread one call ahead of :meth:`take` (RLlib's
    ``sample_async``): the thread steps the next fragment while the caller postprocesses
    and returns the one it took, so a worker's emulators do not wait for that.

    At most one rollout runs ahead, so what it acts with is at most one fragment older
    than what the caller would have used. An exception in the thread is raised by the
    :meth:`take` that would have returned its rollout.

    Example:
        >>> ahead = SampleAhead(iter(range(3)).__next__)
        >>> ahead.take(), ahead.take()
        (0, 1)
    """

    def __init__(self, rollout: Callable[[], Any]):
        self._rollout = rollout
        self._wanted = threading.Semaphore(0)
        self._ready = threading.Semaphore(0)
        self._result: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sample-ahead", daemon=True)
        _SAMPLERS.add(self)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stops the thread once the rollout it is in (if any) ends; :meth:`take` then raises.
        Also run at interpreter exit: a thread left inside an emulator step aborts the process."""
        if self._closed:
            return
        self._closed = True
        self._wanted.release()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        self._error = self._error or RuntimeError("the sampler thread was closed")
        self._ready.release()

    def take(self) -> Any:
        if self._thread.ident is None and not self._closed:  # the first call starts the thread
            self._wanted.release()
            self._thread.start()
        self._ready.acquire()
        if self._error is not None:
            self._ready.release()  # every later take() raises it too, instead of blocking
            raise self._error
        result = self._result
        self._wanted.release()
        return result

    def _run(self) -> None:
        while True:
            self._wanted.acquire()
            if self._closed:
                return
            try:
                self._result = self._rollout()
            except BaseException as error:  # noqa: BLE001 - handed to the caller by take()
                self._error = error
                self._ready.release()
                return
            self._ready.release()


_SAMPLERS: "weakref.WeakSet[SampleAhead]" = weakref.WeakSet()


@atexit.register
def _close_samplers() -> None:
    for sampler in list(_SAMPLERS):
        sampler.close()


class RolloutWorker:
    """Steps its environments with the current policy and returns fragments: one vector, or
    ``num_env_groups`` vectors stepped in turn (see :func:`make_vector_envs`).

    Used as a Ray actor (see :func:`jax_actor`) or in the driver when ``num_workers == 0``.
    """

    def __init__(self, spec: WorkerSpec, index: int, incarnation: int = 0):
        cfg = spec.config
        self.index, self.incarnation, self.config = index, incarnation, cfg
        seed = cfg.seed + 10_000 * index + 1_000_000 * incarnation
        self.envs = make_vector_envs(cfg, seed, index, incarnation)
        apply = spec.network.apply
        self._forward = jax.jit(functools.partial(forward_packed, apply))
        self._postprocess = HostPostprocess(functools.partial(spec.postprocess, config=cfg)) if spec.postprocess else None
        self._grad = (
            jax.jit(jax.grad(functools.partial(spec.loss, apply_fn=apply, config=cfg), has_aux=True))
            if spec.loss
            else None
        )
        self._encode = spec.encode
        self._explore = spec.explore
        self._key = jax.random.PRNGKey(seed)
        self._rng = np.random.default_rng(seed)
        self._obs = [env.reset() for env in self.envs]
        self.env_steps = 0
        # (params, version) as one value: a sampler thread reads both at once.
        self._weights: tuple[Any, int] = (None, -1)
        self._ahead = SampleAhead(self._rollout) if cfg.sample_async else None

    @property
    def params(self) -> Any:
        return self._weights[0]

    @property
    def weights_version(self) -> int:
        return self._weights[1]

    def ping(self) -> int:
        return self.index

    def set_weights(self, weights: Any, version: int) -> None:
        self._weights = (jax.device_put(weights), version)

    def sample(self) -> SampleBatch:
        """One fragment ``[T, B]``: obs, actions, logp, logits, values, rewards, discounts,
        plus ``bootstrap_value`` and ``last_obs`` ``[B]`` after the last step.

        A truncated episode's last reward gets ``gamma * V(final_obs)`` added and its
        discount set to 0, so returns bootstrap from the value on a time limit but
        not on a real termination, and learners need no extra field for it.

        With ``sample_async`` the fragment was stepped by a background thread, which starts
        on the next one before this one is postprocessed, encoded and returned; its
        ``timing`` is then the thread's.
        """
        if self.params is None:
            raise RuntimeError(f"rollout worker {self.index}: sample() before set_weights()")
        start = time.perf_counter()
        rollout = self._rollout() if self._ahead is None else self._ahead.take()
        traj = rollout.traj
        if self._postprocess is not None:
            traj = self._postprocess(traj)
        if self._encode is not None:
            traj = self._encode(traj, self.config)
        timing = rollout.timing
        if self._ahead is None:  # postprocessing included
            timing = timing._replace(sample_s=time.perf_counter() - start)
        return SampleBatch(traj, rollout.env_steps, rollout.returns, rollout.lengths, rollout.version, timing)

    def _rollout(self) -> Rollout:
        """Steps the envs for one fragment with the weights in hand when it starts."""
        params, version = self._weights
        start, env_watch, policy_watch = time.perf_counter(), Stopwatch(), Stopwatch()
        cfg, T, n = self.config, self.config.rollout_fragment_length, self.envs[0].num_envs
        B = n * len(self.envs)
        out = [self._forward(params, o) for o in self._obs]
        obs = np.empty((T, B) + self._obs[0].shape[1:], self._obs[0].dtype)
        actions = np.empty((T, B), np.int32)
        logp, values, rewards, discounts = (np.empty((T, B), np.float32) for _ in range(4))
        logits = np.empty((T, B, out[0].shape[1] - 1), np.float32)

        def act(g: int, t: int) -> None:
            # The copies into the fragment run while the group's emulators (ALE's threads) step.
            with policy_watch:
                lg, v = split_packed(out[g])
            if self._explore is None:
                a, lp = sample_categorical(self._rng, lg)
            else:
                a, lp = self._explore(self._rng, lg, cfg, self.index, self.env_steps + t * B + g * n)
            with env_watch:
                self.envs[g].step_async(a)
            cols = slice(g * n, (g + 1) * n)
            obs[t, cols], actions[t, cols], logp[t, cols], values[t, cols], logits[t, cols] = self._obs[g], a, lp, v, lg

        def collect(g: int, t: int) -> None:
            # The next forward pass is dispatched as soon as its observation exists, so on a GPU
            # it runs during the reward bookkeeping.
            with env_watch:
                step = self.envs[g].step_wait()
            out[g] = self._forward(params, step.obs)
            r = step.reward
            bootstrap = step.truncated & ~step.terminated
            if bootstrap.any():
                with policy_watch:
                    r = r + cfg.gamma * bootstrap * split_packed(self._forward(params, step.final_obs))[1]
            cols = slice(g * n, (g + 1) * n)
            rewards[t, cols] = r
            discounts[t, cols] = cfg.gamma * ~(step.terminated | step.truncated)
            self._obs[g] = step.obs

        # With several groups, one group's emulators run while the worker waits for the policy
        # on the next group and picks its actions (double buffering at two groups).
        for g in range(len(self.envs)):
            act(g, 0)
        for t in range(T):
            for g in range(len(self.envs)):
                collect(g, t)
                if t + 1 < T:
                    act(g, t + 1)
        with policy_watch:
            bootstrap_value = np.concatenate([split_packed(o)[1] for o in out])
        last_obs = self._obs[0] if len(self._obs) == 1 else np.concatenate(self._obs)
        traj = dict(
            obs=obs, actions=actions, logp=logp, logits=logits, values=values, rewards=rewards,
            discounts=discounts, bootstrap_value=bootstrap_value, last_obs=last_obs,
        )
        self.env_steps += T * B
        returns, lengths = (np.concatenate(x) for x in zip(*(env.pop_episodes() for env in self.envs)))
        timing = SampleTiming(time.perf_counter() - start, env_watch.seconds, policy_watch.seconds)
        return Rollout(traj, T * B, returns, lengths, version, timing)

    def close(self) -> None:
        """Stops the sampler thread (``sample_async``) and the environments."""
        if self._ahead is not None:
            self._ahead.close()
        for env in self.envs:
            env.close()

    def compute_gradients(self, batch: SampleBatch) -> GradientsResult:
        """Gradients of the algorithm's loss on ``batch`` at the worker's current weights."""
        self._key, key = jax.random.split(self._key)
        grads, metrics = self._grad(self.params, flatten_time_major(batch.data), key)
        grads, metrics = jax.device_get((grads, metrics))
        return GradientsResult(
            grads, {k: float(v) for k, v in metrics.items()}, batch.env_steps,
            batch.episode_returns, batch.episode_lengths, batch.weights_version, batch.timing,
        )

    def run_chain(self, method: str, fns: Sequence[Callable[..., Any]]) -> Any:
        """Calls ``method`` then ``fns`` in order on its result: ``par_for_each`` on the actor side."""
        item = getattr(self, method)()
        for fn in fns:
            item = _call(fn, item, self)
        return item


def split_packed(packed: Any) -> tuple[np.ndarray, np.ndarray]:
    """``forward_packed``'s ``[B, A + 1]`` output (one compiled call, one host transfer per
    step: rollouts are dispatch-bound) -> host ``(logits [B, A], values [B])``."""
    out = np.asarray(packed)
    return out[:, :-1], out[:, -1]


def sample_categorical(rng: np.random.Generator, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples ``a ~ softmax(logits)`` per row by the Gumbel-max trick; returns ``(a, log p(a))``.

    Done in numpy on the host: drawing the noise with JAX's counter-based PRNG
    inside the jitted policy costs more than the network itself on a CPU.
    """
    actions = np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1).astype(np.int32)
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return actions, np.take_along_axis(logp, actions[:, None], axis=-1)[:, 0].astype(np.float32)


class WorkerCrashedError(RuntimeError):
    """A rollout worker died (or hung) and ``on_worker_failure="raise"``."""


class _InDriver:
    """Stands in for an actor handle when sampling happens in the driver (num_workers=0)."""

    def __init__(self, worker: RolloutWorker):
        self.worker = worker


class WorkerSet:
    """The rollout workers of a run: created together, given weights through the object
    store (one ``ray.put``, many readers), and replaced or dropped when they die.

    It is the :class:`~jaxflow.iterators.ActorSource` behind ``ParallelRollouts``.
    """

    def __init__(self, spec: Any, weights: Any, version: Any = 0, worker_cls: type = None):
        cfg = spec.config
        self.spec, self.config = spec, cfg
        self.worker_cls = worker_cls or RolloutWorker
        # Multi-agent workers take each policy's weights on their own and keep the rest.
        self._merge = getattr(self.worker_cls, "merge_weights", lambda old, new: new)
        self._weights = self._version = None
        self.timeout_s = cfg.worker_timeout_s
        self.num_restarts = 0
        self._incarnation: dict[int, int] = {}
        self._slots: dict[int, Any] = {}
        if cfg.num_workers == 0:
            self._slots[0] = _InDriver(self.worker_cls(spec, 0))
        else:
            # Ray would queue actors that cannot be placed forever; say so instead.
            need = cfg.num_workers * cfg.num_cpus_per_worker
            free, total = _free_cpus(need), ray.cluster_resources().get("CPU", 0)
            if need > free:
                raise ConfigError(
                    f"num_workers={cfg.num_workers} x num_cpus_per_worker={cfg.num_cpus_per_worker} needs {need:g} "
                    f"CPUs but only {free:g} of the Ray cluster's {total:g} are free (another run may hold the rest); "
                    "lower num_workers or num_cpus_per_worker, or stop the other run."
                )
            gpus = cfg.num_workers * cfg.num_gpus_per_worker
            have = ray.cluster_resources().get("GPU", 0)
            if gpus > have:
                raise ConfigError(
                    f"num_workers={cfg.num_workers} x num_gpus_per_worker={cfg.num_gpus_per_worker} needs {gpus:g} "
                    f"GPUs but the Ray cluster has {have:g}; set num_gpus_per_worker=0 to act on the workers' CPUs"
                    + (f", or at most {have / cfg.num_workers:g} for the workers to share the GPUs there are." if have else ".")
                )
            self._actor_cls = jax_actor(self.worker_cls, num_gpus=cfg.num_gpus_per_worker,
                                        num_cpus=cfg.num_cpus_per_worker, max_restarts=0)
            for i in range(cfg.num_workers):
                self._slots[i] = self._create(i)
            self._check_started(list(self._slots.items()))
        self.sync_weights(weights, version)

    def _create(self, index: int) -> Any:
        incarnation = self._incarnation.get(index, -1) + 1
        self._incarnation[index] = incarnation
        return self._actor_cls.remote(self.spec, index, incarnation)

    def _check_started(self, slots: list[tuple[int, Any]]) -> None:
        # Start-up (a new process importing JAX) may take longer than a reply to sample().
        for i, h in slots:
            try:
                ray.get(h.ping.remote(), timeout=max(self.timeout_s, STARTUP_TIMEOUT_S))
            except ray.exceptions.RayError as e:
                raise WorkerCrashedError(f"rollout worker {i} failed to start: {e}") from e

    @property
    def local_worker(self) -> RolloutWorker | None:
        """The in-driver worker when ``num_workers == 0``, else None."""
        slot = self._slots.get(0)
        return slot.worker if isinstance(slot, _InDriver) else None

    @property
    def num_healthy(self) -> int:
        return len(self._slots)

    def live(self) -> list[tuple[int, Any]]:
        return sorted(self._slots.items(), key=lambda s: s[0])

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        if isinstance(handle, _InDriver):
            return ray.put(handle.worker.run_chain(method, fns))
        return handle.run_chain.remote(method, fns)

    def sync_weights(self, weights: Any, version: int) -> None:
        """Sends ``weights`` to every worker: one object-store put, read by all."""
        self._weights, self._version = self._merge(self._weights, weights), self._merge(self._version, version)
        ref = ray.put(weights) if any(not isinstance(h, _InDriver) for h in self._slots.values()) else None
        for h in self._slots.values():
            if isinstance(h, _InDriver):
                h.worker.set_weights(weights, version)
            else:
                h.set_weights.remote(ref, version)

    def set_weights_of(self, index: int, weights: Any, version: int) -> None:
        """Sends ``weights`` to worker ``index`` alone (A3C); they also become the
        weights a restarted worker starts from."""
        self._weights, self._version = self._merge(self._weights, weights), self._merge(self._version, version)
        h = self._slots.get(index)
        if isinstance(h, _InDriver):
            h.worker.set_weights(weights, version)
        elif h is not None:
            h.set_weights.remote(weights, version)

    def on_failure(self, index: int, error: BaseException) -> None:
        mode = self.config.on_worker_failure
        if mode == "raise":
            raise WorkerCrashedError(
                f"rollout worker {index} died or stopped answering: {type(error).__name__}: {error}. "
                "Set on_worker_failure='restart' to recreate it or 'ignore' to continue without it."
            ) from error
        old = self._slots.pop(index)
        if not isinstance(old, _InDriver):
            ray.kill(old, no_restart=True)
        if mode == "ignore":
            log.warning("rollout worker %d failed (%s); continuing with %d workers", index, error, len(self._slots))
            return
        new = self._create(index)
        self._check_started([(index, new)])
        new.set_weights.remote(ray.put(self._weights), self._version)
        self._slots[index] = new
        self.num_restarts += 1
        log.warning("rollout worker %d failed (%s); restarted it (restart #%d)", index, error, self.num_restarts)

    def stop(self) -> None:
        """Kills the worker actors and waits (up to 30 s) until they are gone, so the next
        run in this process finds their CPUs free."""
        actors = [h for h in self._slots.values() if not isinstance(h, _InDriver)]
        for h in self._slots.values():
            if isinstance(h, _InDriver):
                h.worker.close()
        for h in actors:
            ray.kill(h, no_restart=True)
        self._slots.clear()
        for h in actors:
            try:
                ray.get(h.ping.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass


def _free_cpus(need: float, patience_s: float = 15.0) -> float:
    """Free CPUs in the Ray cluster, waiting up to ``patience_s`` for ``need`` of them:
    actors killed a moment ago release theirs asynchronously."""
    deadline = time.monotonic() + patience_s
    while True:
        free = ray.available_resources().get("CPU", 0)
        if free >= need or time.monotonic() > deadline:
            return free
        time.sleep(0.1)
