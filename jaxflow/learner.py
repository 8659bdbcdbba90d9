"""The learner: a train state and a compiled, data-parallel SGD update built from any loss.

``loss_fn(params, batch, rng) -> (loss, metrics)`` is a pure function of a flat
batch ``{name: [N, ...]}``; with a target network it is
``loss_fn(params, batch, rng, target_params)``. Scalar metrics are averaged over
the update's steps; a metric of shape ``[minibatch]`` (per-sample, e.g. DQN's TD
errors for replay priorities) is returned for every sample of the batch, in order. The update runs ``num_epochs`` passes over shuffled
minibatches (one pass over the whole batch, in order, by default) inside one
``jit`` with the state's buffers donated; a convolutional loss on the CPU instead
steps minibatch by minibatch from the host, to the same result (see
:attr:`Learner.loop`). With several local devices the batch
is sharded along its leading axis and the parameters replicated; XLA then
averages the gradients across devices, so the update equals the single-device
update on the same global batch.

Asynchronous plans (Ape-X, IMPALA) run the learner on a :class:`LearnerThread`, fed
and drained through bounded queues, so that the plan's thread keeps sampling,
storing and replaying while the accelerator trains (Horgan et al., 2018,
"Distributed Prioritized Experience Replay", Section 3).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

LossFn = Callable[[Any, Mapping[str, jax.Array], jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]


class TrainState(NamedTuple):
    """Everything the learner needs to continue: saved and restored as one pytree."""

    params: Any
    opt_state: Any
    step: jax.Array
    """Number of optimizer steps applied (int32 scalar)."""
    rng: jax.Array
    """PRNG key (uint32[2]) for the loss's randomness and minibatch shuffles."""
    target_params: Any = None
    """A lagged copy of ``params`` (DQN's target network), or None."""


def make_optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam with global-norm gradient clipping, the default of every algorithm here."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))


def sgd_step(loss_fn: LossFn, optimizer: optax.GradientTransformation, state: TrainState, batch: Any) -> tuple[TrainState, Any]:
    """One optimizer step on one (mini)batch; the loss's metrics plus ``loss`` and ``grad_norm``."""
    key = jax.random.fold_in(state.rng, state.step)
    target = () if state.target_params is None else (state.target_params,)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, key, *target)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(metrics, loss=loss, grad_norm=optax.global_norm(grads))
    return state._replace(params=params, opt_state=opt_state, step=state.step + 1), metrics


def minibatch_indices(key: jax.Array, n: int, num_epochs: int, minibatch_size: int) -> jax.Array:
    """``[num_epochs * (n // minibatch_size), minibatch_size]`` sample indices, one row per
    SGD step: a single epoch goes through the batch in order (replayed or freshly sampled
    batches are already in random order); several epochs shuffle each pass with their own
    key from ``key``. Samples of an incomplete last minibatch are left out of that epoch."""
    num_mb = n // minibatch_size
    if num_epochs == 1:
        return jnp.arange(num_mb * minibatch_size).reshape(num_mb, minibatch_size)
    perms = jax.vmap(lambda k: jax.random.permutation(k, n)[: num_mb * minibatch_size])(jax.random.split(key, num_epochs))
    return perms.reshape(num_epochs * num_mb, minibatch_size)


def shuffle_minibatches(rng: jax.Array, n: int, num_epochs: int, minibatch_size: int) -> tuple[jax.Array, jax.Array]:
    """The state's next PRNG key and an update's :func:`minibatch_indices`."""
    rng, key = jax.random.split(rng)
    return rng, minibatch_indices(key, n, num_epochs, minibatch_size)


def minibatch_step(loss_fn: LossFn, optimizer: optax.GradientTransformation, batch: Mapping[str, jax.Array],
                   state: TrainState, idx: jax.Array) -> tuple[TrainState, Any]:
    """:func:`sgd_step` on the samples ``idx`` of ``batch``."""
    return sgd_step(loss_fn, optimizer, state, jax.tree_util.tree_map(lambda x: x[idx], batch))


def summarize_metrics(metrics: Mapping[str, Any], num_epochs: int) -> dict[str, Any]:
    """Per-step metrics ``[steps, ...]`` of an update to its metrics: scalars averaged over
    the steps, per-sample metrics ``[steps, minibatch, ...]`` of the last epoch flattened
    into the batch's order (numpy or JAX arrays alike)."""
    if num_epochs > 1 and any(m.ndim > 1 for m in metrics.values()):
        raise ValueError("Per-sample metrics need num_epochs == 1: later epochs visit the samples in another order.")
    return {k: m.mean() if m.ndim == 1 else m.reshape((-1,) + m.shape[2:]) for k, m in metrics.items()}


def _check_minibatch(n: int, minibatch_size: int | None) -> int:
    mb = minibatch_size or n
    if n // mb == 0:
        raise ValueError(f"minibatch_size {mb} is larger than the batch ({n} samples)")
    return mb


def sgd_update(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    num_epochs: int,
    minibatch_size: int | None,
    state: TrainState,
    batch: Mapping[str, jax.Array],
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``num_epochs`` passes of minibatch SGD over ``batch`` (see :func:`minibatch_indices`)
    as one ``lax.scan``; metrics as :func:`summarize_metrics` makes them."""
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    chex.assert_tree_shape_prefix(batch, (n,))
    mb = _check_minibatch(n, minibatch_size)
    rng, idx = shuffle_minibatches(state.rng, n, num_epochs, mb)
    step = functools.partial(minibatch_step, loss_fn, optimizer, batch)
    state, metrics = jax.lax.scan(step, state._replace(rng=rng), idx)
    return state, summarize_metrics(metrics, num_epochs)


def apply_gradients(optimizer: optax.GradientTransformation, state: TrainState, grads: Any) -> TrainState:
    """One optimizer step with gradients computed elsewhere (A3C's workers)."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    return state._replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state, step=state.step + 1)


def copy_to_target(state: TrainState) -> TrainState:
    """Sets the target network to the current parameters (Mnih et al., 2015, "Human-level
    control through deep reinforcement learning": the target is refreshed every C steps)."""
    return state._replace(target_params=jax.tree_util.tree_map(jnp.copy, state.params))


class Learner:
    """Holds a :class:`TrainState` on the local devices and updates it.

    Example:
        >>> learner = Learner(loss_fn, optax.adam(1e-3), params, seed=0)  # doctest: +SKIP
        >>> metrics = learner.update({"obs": obs, "target": y})            # doctest: +SKIP
    """

    def __init__(
        self,
        loss_fn: LossFn,
        optimizer: optax.GradientTransformation,
        params: Any,
        seed: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        target_network: bool = False,
    ):
        self.devices = list(devices or jax.local_devices())
        # The state is replaced (and its old buffers donated) by every update, so a learner
        # thread and the plan's thread must not read or replace it at the same time.
        self._lock = threading.RLock()
        self.mesh = Mesh(np.asarray(self.devices), ("batch",))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._sharded = NamedSharding(self.mesh, PartitionSpec("batch"))
        state = TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), jax.random.PRNGKey(seed))
        if target_network:
            state = copy_to_target(state)
        # A copy: the update donates the state's buffers, which must not be the caller's arrays.
        self.state = jax.device_put(state, self._replicated, may_alias=False)
        self._version = 0
        self._num_epochs, self._minibatch_size = num_epochs, minibatch_size
        self._update = jax.jit(
            functools.partial(sgd_update, loss_fn, optimizer, num_epochs, minibatch_size),
            donate_argnums=0,
            out_shardings=(self._replicated, self._replicated),
        )
        self._shuffle = jax.jit(shuffle_minibatches, static_argnums=(1, 2, 3))
        self._step = jax.jit(
            functools.partial(minibatch_step, loss_fn, optimizer),
            donate_argnums=1,
            out_shardings=(self._replicated, self._replicated),
        )
        self._loop: str | None = None
        self._apply = jax.jit(
            functools.partial(apply_gradients, optimizer), donate_argnums=0, out_shardings=self._replicated
        )
        self._copy_to_target = jax.jit(copy_to_target, donate_argnums=0, out_shardings=self._replicated)
        self.thread: LearnerThread | None = None

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def version(self) -> int:
        """Optimizer steps so far; workers tag samples with the version they acted with.

        Counted on the host (equal to ``state.step``), so asking never waits for the device.
        """
        return self._version

    def put_batch(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """Places a flat host batch on the devices, sharded along its leading axis."""
        n = len(next(iter(batch.values())))
        if n % self.num_devices:
            raise ValueError(
                f"A batch of {n} samples cannot be split evenly over {self.num_devices} devices; "
                "choose batch sizes divisible by the device count."
            )
        return jax.device_put(dict(batch), self._sharded)

    @property
    def loop(self) -> str | None:
        """How an update runs its SGD steps, chosen at the first update: ``"scan"``, all of
        them inside one compiled update, or ``"host"``, one compiled step per minibatch
        called from Python. ``"host"`` is for convolutional losses on the CPU, where XLA
        runs a convolution's weight gradient inside a loop body about 10x slower than
        outside one (jax-ml/jax#12868); a step costs far more than its dispatch there."""
        return self._loop

    def _run(self, state: TrainState, device_batch: dict[str, jax.Array]) -> tuple[TrainState, dict[str, Any]]:
        n = len(next(iter(device_batch.values())))
        mb = _check_minibatch(n, self._minibatch_size)
        if self._loop is None:
            self._loop = "host" if self._convolutional_on_cpu(state, device_batch, mb) else "scan"
        if self._loop == "scan":
            return self._update(state, device_batch)
        rng, idx = self._shuffle(state.rng, n, self._num_epochs, mb)
        state, steps = state._replace(rng=rng), []
        for row in np.asarray(idx):
            state, metrics = self._step(device_batch, state, row)
            steps.append(metrics)
        # Stacked on the device: nothing here waits for the steps to finish.
        return state, summarize_metrics(jax.tree_util.tree_map(lambda *m: jnp.stack(m), *steps), self._num_epochs)

    def _convolutional_on_cpu(self, state: TrainState, device_batch: dict[str, jax.Array], mb: int) -> bool:
        if self.devices[0].platform != "cpu":
            return False
        lowered = self._step.lower(device_batch, state, np.zeros(mb, np.int32))
        return "stablehlo.convolution" in lowered.as_text()

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """One SGD update (all epochs and minibatches) on a flat host batch; returns mean
        metrics as floats and per-sample metrics as numpy arrays."""
        device_batch = self.put_batch(batch)
        n = len(next(iter(device_batch.values())))
        with self._lock:
            self.state, metrics = self._run(self.state, device_batch)
            self._version += self._num_epochs * (n // (self._minibatch_size or n))
        return {k: float(v) if v.ndim == 0 else np.asarray(v) for k, v in jax.device_get(metrics).items()}

    def update_target(self) -> None:
        """Copies the parameters into the target network."""
        if self.state.target_params is None:
            raise ValueError("This learner has no target network (build it with target_network=True).")
        with self._lock:
            self.state = self._copy_to_target(self.state)

    def warm_up(self, batch: Mapping[str, np.ndarray]) -> None:
        """Compiles the update for ``batch``'s shapes by running it on a copy of the state
        (the result is dropped), so the first real update starts at full speed."""
        state = jax.device_put(self.state, self._replicated, may_alias=False)
        jax.block_until_ready(self._run(state, self.put_batch(batch)))

    def apply_gradients(self, grads: Any) -> None:
        grads = jax.device_put(grads, self._replicated)
        with self._lock:
            self.state = self._apply(self.state, grads)
            self._version += 1

    def get_weights(self) -> Any:
        """The parameters as numpy arrays, for rollout workers."""
        with self._lock:
            return jax.device_get(self.state.params)

    def get_state(self) -> TrainState:
        """The whole state on the host (for checkpoints), read consistently."""
        with self._lock:
            return jax.device_get(self.state)

    def set_state(self, state: TrainState) -> None:
        with self._lock:
            self.state = jax.device_put(state, self._replicated, may_alias=False)
            self._version = int(jax.device_get(state.step))

    def start_thread(self, to_host_batch: Callable[[Any], dict[str, Any]], inqueue_size: int = 8, outqueue_size: int = 8) -> "LearnerThread":
        """Starts a :class:`LearnerThread` on this learner; :meth:`stop` ends it."""
        self.stop()
        self.thread = LearnerThread(self, to_host_batch, inqueue_size, outqueue_size)
        self.thread.start()
        return self.thread

    def stop(self) -> None:
        """Stops the learner thread, if one was started."""
        if self.thread is not None:
            self.thread.stop()
            self.thread = None


_POLL_S = 0.5
"""How long a blocking queue call waits before it re-checks that the thread is alive."""


class LearnerThreadError(RuntimeError):
    """The learner thread raised; the original error is the cause."""


class LearnerThread(threading.Thread):
    """Runs ``learner.update`` on every batch from ``inqueue`` and puts ``(batch, metrics)``
    on ``outqueue``.

    ``to_host_batch(item) -> dict`` makes the learner's flat batch from a queued item
    (e.g. a replayed batch plus its importance weights). Queue waits and update times
    are kept in :attr:`stats` (seconds, since start); a failure stops the thread and is
    raised again by whoever next waits on its queues.

    Example:
        >>> thread = LearnerThread(learner, lambda b: dict(b.data, weights=b.weights))  # doctest: +SKIP
        >>> thread.start(); thread.inqueue.put(replay_batch)                         # doctest: +SKIP
        >>> batch, metrics = thread.outqueue.get()                                   # doctest: +SKIP
    """

    def __init__(self, learner: "Learner", to_host_batch: Callable[[Any], dict[str, Any]], inqueue_size: int = 8, outqueue_size: int = 8):
        super().__init__(daemon=True, name="learner-thread")
        self.learner, self.to_host_batch = learner, to_host_batch
        self.inqueue: queue.Queue = queue.Queue(maxsize=inqueue_size)
        self.outqueue: queue.Queue = queue.Queue(maxsize=outqueue_size)
        self.stats = {"updates": 0, "inqueue_wait_s": 0.0, "outqueue_wait_s": 0.0, "update_s": 0.0}
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                t0 = time.perf_counter()
                try:
                    item = self.inqueue.get(timeout=_POLL_S)
                except queue.Empty:
                    self.stats["inqueue_wait_s"] += time.perf_counter() - t0
                    continue
                t1 = time.perf_counter()
                metrics = self.learner.update(self.to_host_batch(item))
                t2 = time.perf_counter()
                if not put(self.outqueue, (item, metrics), self._stop_event.is_set):
                    return
                self.stats["inqueue_wait_s"] += t1 - t0
                self.stats["update_s"] += t2 - t1
                self.stats["outqueue_wait_s"] += time.perf_counter() - t2
                self.stats["updates"] += 1
        except BaseException as e:  # re-raised in the plan's thread by Enqueue/Dequeue
            self.error = e

    def check(self) -> None:
        """Raises :class:`LearnerThreadError` if the thread failed."""
        if self.error is not None:
            raise LearnerThreadError(f"the learner thread failed: {self.error!r}") from self.error

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)


def put(q: queue.Queue, item: Any, give_up: Callable[[], bool]) -> bool:
    """Blocks until ``item`` is in ``q`` (True) or ``give_up()`` turns true (False),
    checking ``give_up`` every half second rather than spinning."""
    while not give_up():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False

