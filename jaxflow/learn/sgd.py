"""The learner's pure functions: a train state, Adam with clipping, and minibatch SGD as one
``lax.scan`` over any loss ``loss_fn(params, batch, rng[, target_params]) -> (loss, metrics)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import chex
import jax
import jax.numpy as jnp
import optax

from jaxflow.config.groups import NO_CLIPPING

LossFn = Callable[[Any, Mapping[str, jax.Array], jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]


@runtime_checkable
class StepLoss(Protocol):
    """A loss that changes with the optimizer step (a config with ``schedules``, see
    :class:`~jaxflow.learn.schedules.ScheduledLoss`): ``at(step)`` is the loss at that step."""

    def at(self, step: jax.Array) -> LossFn: ...


AnyLoss = LossFn | StepLoss
"""What the SGD functions take: a loss, or a loss that changes with the optimizer step."""


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

    @classmethod
    def create(
        cls, params: Any, optimizer: optax.GradientTransformation, rng: jax.Array, target_network: bool = False
    ) -> TrainState:
        """A fresh state: the optimizer's initial state, step 0, and with ``target_network`` a
        target copy of the parameters.

        Example:
            >>> state = TrainState.create({"w": jnp.ones(2)}, optax.sgd(0.1), jax.random.PRNGKey(0))
            >>> int(state.step), state.target_params is None
            (0, True)
        """
        state = cls(params, optimizer.init(params), jnp.zeros((), jnp.int32), rng)
        return copy_to_target(state) if target_network else state


def make_optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam with global-norm gradient clipping, the default of every algorithm here.

    A plain ``max_grad_norm`` of :data:`~jaxflow.config.NO_CLIPPING` or more clips nothing
    and skips the norm (about 7% of TD3's update on the CPU); ``optax.identity`` takes the
    clipping's place, so the optimizer state has the same structure either way.
    """
    unclipped = isinstance(max_grad_norm, (int, float)) and max_grad_norm >= NO_CLIPPING
    clip = optax.identity() if unclipped else optax.clip_by_global_norm(max_grad_norm)
    return optax.chain(clip, optax.adam(lr, eps=1e-5))


def optimizer_update(optimizer: optax.GradientTransformation, grads: Any, state: TrainState) -> tuple[Any, Any]:
    """``optimizer.update`` with the train state's ``step`` as an extra argument: the
    transformations that take it (:func:`~jaxflow.learn.optimizers.every_k_steps`) see the
    SGD step, the others drop it (:func:`optax.with_extra_args_support`)."""
    return optax.with_extra_args_support(optimizer).update(grads, state.opt_state, state.params, step=state.step)


def loss_and_grads(loss_fn: AnyLoss, state: TrainState, batch: Any) -> tuple[tuple[jax.Array, Any], Any]:
    """``((loss, metrics), grads)`` of the loss at the state's step on ``batch``, with the
    step's key (the state's key folded with the step) and the target network, if any."""
    key = jax.random.fold_in(state.rng, state.step)
    target = () if state.target_params is None else (state.target_params,)
    fn = loss_fn.at(state.step) if isinstance(loss_fn, StepLoss) else loss_fn
    return jax.value_and_grad(fn, has_aux=True)(state.params, batch, key, *target)


def guarded_step(
    optimizer: optax.GradientTransformation, state: TrainState, loss: jax.Array, grads: Any
) -> tuple[TrainState, dict[str, jax.Array]]:
    """The optimizer step for ``grads``; ``loss``, ``grad_norm`` and ``nonfinite_step_fraction``
    (1 where the loss or the gradient was NaN or infinite: the parameters and the optimizer
    state are then left as they were, the step still counts)."""
    updates, opt_state = optimizer_update(optimizer, grads, state)
    params = optax.apply_updates(state.params, updates)
    grad_norm = optax.global_norm(grads)
    # A NaN or inf anywhere in the gradient makes its norm non-finite: one check for the tree.
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    params, opt_state = jax.tree.map(
        lambda new, old: jnp.where(finite, new, old), (params, opt_state), (state.params, state.opt_state)
    )
    metrics = {"loss": loss, "grad_norm": grad_norm, "nonfinite_step_fraction": 1.0 - finite.astype(jnp.float32)}
    return state._replace(params=params, opt_state=opt_state, step=state.step + 1), metrics


def sgd_step(
    loss_fn: AnyLoss, optimizer: optax.GradientTransformation, state: TrainState, batch: Any
) -> tuple[TrainState, Any]:
    """One optimizer step on one (mini)batch (:func:`guarded_step`); the loss's metrics plus
    ``loss``, ``grad_norm`` and ``nonfinite_step_fraction``."""
    (loss, metrics), grads = loss_and_grads(loss_fn, state, batch)
    state, applied = guarded_step(optimizer, state, loss, grads)
    return state, dict(metrics, **applied)


def minibatch_indices(key: jax.Array, n: int, num_epochs: int, minibatch_size: int, num_shards: int = 1) -> jax.Array:
    """``[num_epochs * (n // minibatch_size), minibatch_size]`` sample indices, one row per
    SGD step: a single epoch goes through the batch in order (replayed or freshly sampled
    batches are already in random order); several epochs shuffle each pass with their own
    key from ``key``. Samples of an incomplete last minibatch are left out of that epoch.

    With ``num_shards`` blocks (:func:`shard_blocks`: the batch sharded over that many
    devices in equal consecutive blocks), each epoch shuffles every block on its own and a
    minibatch takes an equal part from each, block by block: every device then gathers its
    part of a minibatch from its own rows and only the gradients cross devices. A shuffle of
    the whole batch would gather each minibatch onto every device, and every device would
    compute the whole minibatch.

    Example:
        >>> minibatch_indices(jax.random.PRNGKey(0), 8, 2, 4, num_shards=2).shape
        (4, 4)
    """
    num_mb = n // minibatch_size
    if num_epochs == 1:
        return jnp.arange(num_mb * minibatch_size).reshape(num_mb, minibatch_size)
    if num_shards == 1:
        perms = jax.vmap(lambda k: jax.random.permutation(k, n)[: num_mb * minibatch_size])(
            jax.random.split(key, num_epochs)
        )
        return perms.reshape(num_epochs * num_mb, minibatch_size)
    block, part = n // num_shards, minibatch_size // num_shards
    keys = jax.random.split(key, (num_epochs, num_shards))
    perms = jax.vmap(jax.vmap(lambda k: jax.random.permutation(k, block)[: num_mb * part]))(keys)
    perms = perms + (jnp.arange(num_shards) * block)[:, None]  # [epochs, shards, num_mb * part], global
    perms = perms.reshape(num_epochs, num_shards, num_mb, part).transpose(0, 2, 1, 3)
    return perms.reshape(num_epochs * num_mb, minibatch_size)


def shard_blocks(n: int, num_epochs: int, minibatch_size: int, num_devices: int) -> int:
    """The blocks :func:`minibatch_indices` shuffles within for a batch of ``n`` sharded over
    ``num_devices``: one per device where each holds an equal part of every minibatch (the
    device count divides ``n`` and ``minibatch_size``; one epoch in order only when the
    minibatch is the whole batch, whose order is already by block), else 1."""
    in_blocks = num_epochs > 1 or minibatch_size == n
    return num_devices if num_devices > 1 and in_blocks and not (n % num_devices or minibatch_size % num_devices) else 1


def default_shuffle_devices(devices: Sequence[jax.Device]) -> int:
    """The device count a learner's minibatches are shuffled for (:func:`~jaxflow.learn.sgd.shard_blocks`):
    its devices, so each computes its own part of every minibatch and only the gradients
    cross devices; but 1 (the whole minibatch on every device) on CPUs of several processes,
    where every step's all-reduce is a gloo round trip that waits for the other processes,
    while the :class:`~jaxflow.learn.learner.Learner` gathers a whole-minibatch batch onto
    every device once per update. PPO's CartPole update, 32 steps, in 2 learner processes on
    2 loaded cores: 0.06 s whole, 0.14 s in blocks with one flat all-reduce a step
    (:mod:`~jaxflow.learn.reduce`), 0.40 s in blocks reduced by the partitioner
    (``benchmarks/group_update.py``, hidden 64; at hidden 512 0.62, 0.66 and 2.0 s)."""
    multi_process = len({d.process_index for d in devices}) > 1
    return 1 if multi_process and devices[0].platform == "cpu" else len(devices)


def shuffle_minibatches(
    rng: jax.Array, n: int, num_epochs: int, minibatch_size: int, num_shards: int = 1
) -> tuple[jax.Array, jax.Array]:
    """The state's next PRNG key and an update's :func:`minibatch_indices`."""
    rng, key = jax.random.split(rng)
    return rng, minibatch_indices(key, n, num_epochs, minibatch_size, num_shards)


def take_rows(x: jax.Array, idx: jax.Array, num_shards: int = 1) -> jax.Array:
    """``x[idx]`` for indices :func:`minibatch_indices` made in ``num_shards`` blocks: each
    block's rows gathered within that block, so XLA keeps the gather on its device."""
    if num_shards == 1:
        return x[idx]
    blocks = x.reshape((num_shards, x.shape[0] // num_shards) + x.shape[1:])
    local = idx.reshape(num_shards, -1) - (jnp.arange(num_shards) * blocks.shape[1])[:, None]
    return jax.vmap(lambda rows, i: rows[i])(blocks, local).reshape((idx.shape[0],) + x.shape[1:])


def minibatch_step(
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    batch: Mapping[str, jax.Array],
    state: TrainState,
    idx: jax.Array,
    num_shards: int = 1,
) -> tuple[TrainState, Any]:
    """:func:`sgd_step` on the samples ``idx`` of ``batch`` (made in ``num_shards`` blocks)."""
    return sgd_step(loss_fn, optimizer, state, jax.tree_util.tree_map(lambda x: take_rows(x, idx, num_shards), batch))


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
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    num_epochs: int,
    minibatch_size: int | None,
    state: TrainState,
    batch: Mapping[str, jax.Array],
    num_devices: int = 1,
    move_by: jax.Array | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """``num_epochs`` passes of minibatch SGD over ``batch`` (see :func:`minibatch_indices`;
    minibatches in blocks by :func:`shard_blocks` for a batch sharded over ``num_devices``)
    as one ``lax.scan``; metrics as :func:`summarize_metrics` makes them. With ``move_by``,
    then :func:`move_target` by that fraction: one compiled call where a target update
    falls due with the update."""
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    chex.assert_tree_shape_prefix(batch, (n,))
    mb = _check_minibatch(n, minibatch_size)
    shards = shard_blocks(n, num_epochs, mb, num_devices)
    rng, idx = shuffle_minibatches(state.rng, n, num_epochs, mb, shards)
    step = functools.partial(minibatch_step, loss_fn, optimizer, batch, num_shards=shards)
    state, metrics = jax.lax.scan(step, state._replace(rng=rng), idx)
    if move_by is not None:
        state = move_target(state, move_by)
    return state, summarize_metrics(metrics, num_epochs)


def apply_gradients(optimizer: optax.GradientTransformation, state: TrainState, grads: Any) -> TrainState:
    """One optimizer step with gradients computed elsewhere (A3C's workers)."""
    updates, opt_state = optimizer_update(optimizer, grads, state)
    return state._replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state, step=state.step + 1)


def move_target(state: TrainState, fraction: jax.Array | float) -> TrainState:
    """Moves the target network toward the parameters: ``target += fraction * (params -
    target)``; ``fraction = 1`` copies them, a small one is Polyak averaging (Lillicrap et
    al., 2016, DDPG; Haarnoja et al., 2018, SAC)."""
    return state._replace(
        target_params=jax.tree_util.tree_map(lambda t, p: t + fraction * (p - t), state.target_params, state.params)
    )


def target_fraction(tau: float, num_steps: int) -> float:
    """The fraction one target update moves by after ``num_steps`` SGD steps, as ``num_steps``
    per-step averages with ``tau`` would toward fixed parameters: ``1 - (1 - tau)^num_steps``."""
    return 1.0 - (1.0 - tau) ** num_steps


def copy_to_target(state: TrainState) -> TrainState:
    """Sets the target network to the current parameters (Mnih et al., 2015, "Human-level
    control through deep reinforcement learning": the target is refreshed every C steps)."""
    return state._replace(target_params=jax.tree_util.tree_map(jnp.copy, state.params))
