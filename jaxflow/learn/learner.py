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
update on the same global batch. On CPUs of several processes (a learner group's)
the steps run under ``shard_map`` instead, each step's gradients all-reduced as one
flat array (:mod:`~jaxflow.learn.reduce`), to the same result.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxflow.learn.reduce import AXIS, flat_by_default, flat_minibatch_step, flat_sgd_update
from jaxflow.learn.sgd import (
    AnyLoss,
    TrainState,
    _check_minibatch,
    apply_gradients,
    default_shuffle_devices,
    minibatch_step,
    move_target,
    sgd_update,
    shard_blocks,
    shuffle_minibatches,
    summarize_metrics,
    target_fraction,
)
from jaxflow.learn.thread import LearnerThread
from jaxflow.rollout.batch import train_arrays
from jaxflow.rollout.guards import DivergenceError


class NonFiniteUpdateError(DivergenceError):
    """An SGD step's loss or gradient was NaN or infinite (its parameters were not changed)."""


def check_nonfinite(fraction: float, on_nonfinite: str, where: str) -> None:
    """Raises :class:`NonFiniteUpdateError` when some SGD steps were skipped as non-finite and
    the run says ``on_nonfinite="raise"``."""
    if on_nonfinite == "raise" and fraction > 0:
        raise NonFiniteUpdateError(
            f"learner: the loss or its gradient was NaN or infinite in {fraction:.0%} of the SGD steps of the "
            f"update ending at {where}; those steps left the parameters unchanged and the run stops "
            "(on_nonfinite='skip' skips such steps and goes on)."
        )


class Learner:
    """Holds a :class:`TrainState` on the local devices and updates it.

    Example:
        >>> learner = Learner(loss_fn, optax.adam(1e-3), params, seed=0)  # doctest: +SKIP
        >>> metrics = learner.update({"obs": obs, "target": y})            # doctest: +SKIP
    """

    def __init__(
        self,
        loss_fn: AnyLoss,
        optimizer: optax.GradientTransformation,
        params: Any,
        seed: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        devices: Sequence[jax.Device] | None = None,
        target_network: bool = False,
        on_nonfinite: str = "raise",
        shuffle_devices: int | None = None,
        flat_reduce: bool | None = None,
    ):
        self.devices = list(devices or jax.local_devices())
        self._shuffle_devices = shuffle_devices or default_shuffle_devices(self.devices)
        self.flat_reduce = self._flat_reduce(flat_reduce)
        # The state is replaced (and its old buffers donated) by every update, so a learner
        # thread and the plan's thread must not read or replace it at the same time.
        self._lock = threading.RLock()
        self.mesh = Mesh(np.asarray(self.devices), (AXIS,))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._sharded = NamedSharding(self.mesh, PartitionSpec(AXIS))
        state = TrainState.create(params, optimizer, jax.random.PRNGKey(seed), target_network)
        # A copy: the update donates the state's buffers, which must not be the caller's arrays.
        self.state = jax.device_put(state, self._replicated, may_alias=False)
        self._version = 0
        self.on_nonfinite = on_nonfinite
        self._num_epochs, self._minibatch_size = num_epochs, minibatch_size
        # Whole minibatches on several devices: every device computes each minibatch whole,
        # so the batch is gathered onto every device once per update, not once per SGD step
        # (on CPUs of several processes each of gloo's gathers is a round trip).
        self._gather = jax.jit(lambda batch: batch, out_shardings=self._replicated)
        update = (
            functools.partial(flat_sgd_update, mesh=self.mesh)
            if self.flat_reduce
            else functools.partial(sgd_update, num_devices=self._shuffle_devices)
        )
        self._update = jax.jit(
            functools.partial(update, loss_fn, optimizer, num_epochs, minibatch_size),
            donate_argnums=0,
            out_shardings=(self._replicated, self._replicated),
        )
        self._shuffle = jax.jit(shuffle_minibatches, static_argnums=(1, 2, 3, 4))
        step = functools.partial(flat_minibatch_step, mesh=self.mesh) if self.flat_reduce else minibatch_step
        self._step = jax.jit(
            functools.partial(step, loss_fn, optimizer),
            static_argnums=3,
            donate_argnums=1,
            out_shardings=(self._replicated, self._replicated),
        )
        self._loop: str | None = None
        self._apply = jax.jit(
            functools.partial(apply_gradients, optimizer), donate_argnums=0, out_shardings=self._replicated
        )
        self._move_target = jax.jit(move_target, donate_argnums=0, out_shardings=self._replicated)
        self._target_rule: tuple[int, float] | None = None
        self._target_moved_at = 0
        self.target_updates = 0
        """Target updates made by :meth:`follow_target`'s rule so far."""
        self.thread: LearnerThread | None = None

    def _flat_reduce(self, asked: bool | None) -> bool:
        """Whether the update's steps run in blocks with one flat all-reduce each
        (:mod:`~jaxflow.learn.reduce`): as ``asked``, else :func:`~jaxflow.learn.reduce.flat_by_default`;
        only for minibatches in blocks of every device (``shuffle_devices``, the default)."""
        flat = flat_by_default(self.devices) if asked is None else asked
        return flat and self._shuffle_devices == len(self.devices) > 1

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def version(self) -> int:
        """Optimizer steps so far; workers tag samples with the version they acted with.

        Counted on the host (equal to ``state.step``), so asking never waits for the device.
        """
        return self._version

    def put_batch(self, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Places a flat host batch on the devices, sharded along its leading axis. On a mesh
        of several processes' devices (a :class:`~jaxflow.learn.group.LearnerGroup`'s) the
        batch is this process's rows, and the global batch their concatenation in process order."""
        n = len(jax.tree.leaves(batch)[0])
        local = [d for d in self.devices if d.process_index == jax.process_index()]
        if n % len(local):
            raise ValueError(
                f"A batch of {n} samples cannot be split evenly over {len(local)} devices; "
                "choose batch sizes divisible by the device count."
            )
        if self.mesh.is_multi_process:
            return {k: jax.make_array_from_process_local_data(self._sharded, np.asarray(v)) for k, v in batch.items()}
        return jax.device_put(dict(batch), self._sharded)

    @property
    def loop(self) -> str | None:
        """How an update runs its SGD steps, chosen at the first update: ``"scan"``, all of
        them inside one compiled update, or ``"host"``, one compiled step per minibatch
        called from Python. ``"host"`` is for convolutional losses on the CPU, where XLA
        runs a convolution's weight gradient inside a loop body about 10x slower than
        outside one (jax-ml/jax#12868); a step costs far more than its dispatch there."""
        return self._loop

    def _run(
        self, state: TrainState, device_batch: dict[str, jax.Array], fraction: float | None = None
    ) -> tuple[TrainState, dict[str, Any]]:
        n = len(jax.tree.leaves(device_batch)[0])
        mb = _check_minibatch(n, self._minibatch_size)
        shards = shard_blocks(n, self._num_epochs, mb, self._shuffle_devices)
        if shards == 1 and len(self.devices) > 1:
            device_batch = self._gather(device_batch)
        if self._loop is None:
            self._loop = "host" if self._convolutional_on_cpu(state, device_batch, mb) else "scan"
        if self._loop == "scan":
            move_by = None if fraction is None else np.float32(fraction)
            return self._update(state, device_batch, move_by=move_by)
        rng, idx = self._shuffle(state.rng, n, self._num_epochs, mb, shards)
        state, steps = state._replace(rng=rng), []
        for row in np.asarray(idx):
            state, metrics = self._step(device_batch, state, row, shards)
            steps.append(metrics)
        if fraction:
            state = self._move_target(state, np.float32(fraction))
        # Stacked on the device: nothing here waits for the steps to finish.
        return state, summarize_metrics(jax.tree_util.tree_map(lambda *m: jnp.stack(m), *steps), self._num_epochs)

    def _convolutional_on_cpu(self, state: TrainState, device_batch: dict[str, jax.Array], mb: int) -> bool:
        if self.devices[0].platform != "cpu":
            return False
        lowered = self._step.lower(device_batch, state, np.zeros(mb, np.int32), 1)
        return "stablehlo.convolution" in lowered.as_text()

    def update(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """One SGD update (all epochs and minibatches) on a flat host batch; returns mean
        metrics as floats and per-sample metrics as numpy arrays."""
        device_batch = self.put_batch(batch)
        n = len(jax.tree.leaves(device_batch)[0])
        steps = self._num_epochs * (n // (self._minibatch_size or n))
        with self._lock:
            fraction = self._target_fraction_due(steps)
            self.state, metrics = self._run(self.state, device_batch, fraction)
            self._version += steps
        out = {k: float(v) if v.ndim == 0 else np.asarray(v) for k, v in jax.device_get(metrics).items()}
        check_nonfinite(
            float(out.get("nonfinite_step_fraction", 0.0)), self.on_nonfinite, f"optimizer step {self._version}"
        )
        return out

    def follow_target(self, target_update_period: int, tau: float = 1.0) -> None:
        """From now on, every update after which ``target_update_period`` optimizer steps or
        more have passed since the last target update also moves the target network, in the
        same compiled call: by ``1 - (1 - tau)^k`` after ``k`` steps
        (:func:`~jaxflow.learn.sgd.target_fraction`; ``tau = 1`` copies). What
        :class:`~jaxflow.ops.UpdateTargetNetwork` asks for."""
        if self.state.target_params is None:
            raise ValueError("This learner has no target network (build it with target_network=True).")
        with self._lock:
            self._target_rule, self._target_moved_at = (target_update_period, tau), self._version

    def _no_move(self) -> float | None:
        """With a target network, a move by 0 (exactly the target it was): then the update that
        moves it is the same compiled function (None compiled it again at the first move)."""
        return None if self.state.target_params is None else 0.0

    def _target_fraction_due(self, steps: int) -> float | None:
        if self._target_rule is None:
            return self._no_move()
        period, tau = self._target_rule
        since = self._version + steps - self._target_moved_at
        if since < period:
            return self._no_move()
        self._target_moved_at, self.target_updates = self._version + steps, self.target_updates + 1
        return target_fraction(tau, since)

    def update_target(self, fraction: float = 1.0) -> None:
        """Moves the target network toward the parameters by ``fraction`` (1: copies them)."""
        if self.state.target_params is None:
            raise ValueError("This learner has no target network (build it with target_network=True).")
        with self._lock:
            self.state = self._move_target(self.state, np.float32(fraction))

    def warm_up(self, batch: Mapping[str, np.ndarray]) -> None:
        """Compiles the update for ``batch``'s shapes by running it on a copy of the state
        (the result is dropped), so the first real update starts at full speed."""
        state = jax.device_put(self.state, self._replicated, may_alias=False)
        jax.block_until_ready(self._run(state, self.put_batch(batch), self._no_move()))

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
            self._version = self._target_moved_at = int(jax.device_get(state.step))

    def start_thread(
        self,
        to_host_batch: Callable[[Any], Mapping[str, Any]] = train_arrays,
        inqueue_size: int = 8,
        outqueue_size: int = 8,
    ) -> LearnerThread:
        """Starts a :class:`LearnerThread` on this learner; :meth:`stop` ends it."""
        self.stop()
        self.thread = LearnerThread(self, to_host_batch, inqueue_size, outqueue_size).start()
        return self.thread

    def stop(self) -> None:
        """Stops the learner thread, if one was started."""
        if self.thread is not None:
            self.thread.stop()
            self.thread = None
