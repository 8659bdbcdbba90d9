"""The learner: a train state and a compiled, data-parallel SGD update built from any loss.

``loss_fn(params, batch, rng) -> (loss, metrics)`` is a pure function of a flat
batch ``{name: [N, ...]}``. The update runs ``num_epochs`` passes over shuffled
minibatches (one pass over the whole batch, in order, by default) inside one
``jit`` with the state's buffers donated. With several local devices the batch
is sharded along its leading axis and the parameters replicated; XLA then
averages the gradients across devices, so the update equals the single-device
update on the same global batch.
"""

from __future__ import annotations

import functools
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


def make_optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam with global-norm gradient clipping, the default of every algorithm here."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))


def _sgd_step(loss_fn: LossFn, optimizer: optax.GradientTransformation, state: TrainState, batch: Any) -> tuple[TrainState, Any]:
    key = jax.random.fold_in(state.rng, state.step)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, key)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(metrics, loss=loss, grad_norm=optax.global_norm(grads))
    return TrainState(params, opt_state, state.step + 1, state.rng), metrics


def sgd_update(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    num_epochs: int,
    minibatch_size: int | None,
    state: TrainState,
    batch: Mapping[str, jax.Array],
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``num_epochs`` passes of minibatch SGD over ``batch``; metrics averaged over steps."""
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    chex.assert_tree_shape_prefix(batch, (n,))
    mb = minibatch_size or n
    num_mb = n // mb
    if num_mb == 0:
        raise ValueError(f"minibatch_size {mb} is larger than the batch ({n} samples)")

    def epoch(state: TrainState, key: jax.Array):
        if num_epochs == 1 and mb == n:
            idx = jnp.arange(n)
        else:
            idx = jax.random.permutation(key, n)[: num_mb * mb]
        minibatches = jax.tree_util.tree_map(lambda x: x[idx].reshape((num_mb, mb) + x.shape[1:]), batch)
        return jax.lax.scan(functools.partial(_sgd_step, loss_fn, optimizer), state, minibatches)

    rng, shuffle = jax.random.split(state.rng)
    state, metrics = jax.lax.scan(epoch, state._replace(rng=rng), jax.random.split(shuffle, num_epochs))
    return state, jax.tree_util.tree_map(jnp.mean, metrics)


def apply_gradients(optimizer: optax.GradientTransformation, state: TrainState, grads: Any) -> TrainState:
    """One optimizer step with gradients computed elsewhere (A3C's workers)."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    return TrainState(optax.apply_updates(state.params, updates), opt_state, state.step + 1, state.rng)


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
    ):
        self.devices = list(devices or jax.local_devices())
        self.mesh = Mesh(np.asarray(self.devices), ("batch",))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._sharded = NamedSharding(self.mesh, PartitionSpec("batch"))
        state = TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), jax.random.PRNGKey(seed))
        # A copy: the update donates the state's buffers, which must not be the caller's arrays.
        self.state = jax.device_put(state, self._replicated, may_alias=False)
        self._update = jax.jit(
            functools.partial(sgd_update, loss_fn, optimizer, num_epochs, minibatch_size),
            donate_argnums=0,
            out_shardings=(self._replicated, self._replicated),
        )
        self._apply = jax.jit(
            functools.partial(apply_gradients, optimizer), donate_argnums=0, out_shardings=self._replicated
        )

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def version(self) -> int:
        """Optimizer steps so far; workers tag samples with the version they acted with."""
        return int(self.state.step)

    def put_batch(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """Places a flat host batch on the devices, sharded along its leading axis."""
        n = len(next(iter(batch.values())))
        if n % self.num_devices:
            raise ValueError(
                f"A batch of {n} samples cannot be split evenly over {self.num_devices} devices; "
                "choose batch sizes divisible by the device count."
            )
        return jax.device_put(dict(batch), self._sharded)

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One SGD update (all epochs and minibatches) on a flat host batch; returns mean metrics."""
        self.state, metrics = self._update(self.state, self.put_batch(batch))
        return {k: float(v) for k, v in jax.device_get(metrics).items()}

    def warm_up(self, batch: Mapping[str, np.ndarray]) -> None:
        """Compiles the update for ``batch``'s shapes by running it on a copy of the state
        (the result is dropped), so the first real update starts at full speed."""
        state = jax.device_put(self.state, self._replicated, may_alias=False)
        jax.block_until_ready(self._update(state, self.put_batch(batch)))

    def apply_gradients(self, grads: Any) -> None:
        self.state = self._apply(self.state, jax.device_put(grads, self._replicated))

    def get_weights(self) -> Any:
        """The parameters as numpy arrays, for rollout workers."""
        return jax.device_get(self.state.params)

    def set_state(self, state: TrainState) -> None:
        self.state = jax.device_put(state, self._replicated, may_alias=False)
