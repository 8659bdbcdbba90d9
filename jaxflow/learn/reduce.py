"""Minibatch SGD in blocks with one all-reduce a step: each device computes the gradient of
its own part of every minibatch, and the step's gradients and scalar metrics cross devices as
one flat array.

Under ``jit`` alone (:func:`~jaxflow.learn.sgd.sgd_update`) XLA's partitioner reduces each
gradient array where it is made; they are combined into one all-reduce, but XLA:CPU sends
each array of it through gloo in a round trip of its own, every step (17 for PPO's MLP).
Here the steps run under ``shard_map`` over the mesh's ``"batch"`` axis: every device holds
the replicated state and its block of rows (:func:`~jaxflow.learn.sgd.shard_blocks`), takes
its equal part of each minibatch from them (:func:`~jaxflow.learn.sgd.minibatch_indices`
puts one in every minibatch), and averages (``pmean``) one raveled vector of its loss,
gradients and scalar metrics over the devices; then every device applies the same guarded
optimizer step (:func:`~jaxflow.learn.sgd.guarded_step`) to its copy of the state.

The result equals the single-device update (to float summation order) for a loss that is
the mean over its samples, with scalar metrics that are means too: the mean of equal parts'
means is the minibatch's mean. jaxflow's losses are. A loss that draws random numbers per
sample (SAC's and TD3's actions and target noise) would draw other numbers on each device's
part than on the whole minibatch; so only learners whose mesh spans several processes take
this path by default (:class:`~jaxflow.learn.learner.Learner`'s ``flat_reduce``), and only
the algorithms with a learner group (PPO, A2C, IMPALA, APPO, DQN, Ape-X, Rainbow) and DD-PPO
make such learners: their losses draw nothing per sample (Rainbow's noisy layers draw their
noise per parameter, the same on every device). SAC and TD3 train on one process, on the
partitioner's path, whose draws are the whole minibatch's.

Such learners still draw whole minibatches unless told to shuffle in blocks
(:func:`~jaxflow.learn.sgd.default_shuffle_devices`): on 2 loaded cores one round trip a
step cost more than every process computing every minibatch (``benchmarks/README.md``).
Blocks split the compute, which whole minibatches do not.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import chex
import jax
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, PartitionSpec

from jaxflow.learn.sgd import (
    AnyLoss,
    TrainState,
    _check_minibatch,
    guarded_step,
    loss_and_grads,
    minibatch_step,
    move_target,
    sgd_update,
    shard_blocks,
    shuffle_minibatches,
    summarize_metrics,
)

AXIS = "batch"
"""The mesh axis the batch is sharded along (the :class:`~jaxflow.learn.learner.Learner`'s)."""

Metrics = tuple[dict[str, jax.Array], dict[str, jax.Array]]
"""A step's metrics on a device: the scalars (the same on every device) and the per-sample ones (its part's)."""


def flat_by_default(devices: Sequence[jax.Device]) -> bool:
    """Whether a learner on ``devices`` whose minibatches are in blocks reduces flat unless
    told: on CPUs of several processes, where gloo reduces each array of a collective in a
    round trip of its own. Accelerators,
    and the devices of one process, keep the partitioner's reductions (one NCCL or in-process
    call for all arrays; per-sample random draws stay those of the whole minibatch)."""
    return len({d.process_index for d in devices}) > 1 and devices[0].platform == "cpu"


def pmean_flat(tree: Any, axis: str = AXIS) -> Any:
    """``tree``'s mean over the devices of ``axis``, reduced as one raveled array: one
    collective with one operand, whatever the number of leaves."""
    flat, unravel = ravel_pytree(tree)
    return unravel(jax.lax.pmean(flat, axis))


def local_step(
    loss_fn: AnyLoss, optimizer: optax.GradientTransformation, state: TrainState, batch: Mapping[str, jax.Array]
) -> tuple[TrainState, Metrics]:
    """:func:`~jaxflow.learn.sgd.sgd_step` on this device's part of a minibatch, inside
    ``shard_map``: the loss, gradients and scalar metrics averaged over the devices in one
    :func:`pmean_flat`, then the guarded step on this device's copy of the state."""
    # Parameters cast to varying: their gradient is then this device's own. Left invariant,
    # shard_map would sum each leaf's gradient over the devices apart (the transpose of the
    # implicit cast), one collective per leaf, the cost this module avoids.
    varying = state._replace(params=jax.lax.pcast(state.params, AXIS, to="varying"))
    (loss, metrics), grads = loss_and_grads(loss_fn, varying, batch)
    scalars = {k: v for k, v in metrics.items() if v.ndim == 0}
    per_sample = {k: v for k, v in metrics.items() if v.ndim > 0}
    loss, grads, scalars = pmean_flat((loss, grads, scalars))
    state, applied = guarded_step(optimizer, state, loss, grads)
    return state, (dict(scalars, **applied), per_sample)


def local_steps(
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batch: Mapping[str, jax.Array],
    idx: jax.Array,
) -> tuple[TrainState, Metrics]:
    """:func:`local_step` on each row of ``idx`` (``[steps, part]``: this device's part of each
    minibatch, global row indices within its block of ``batch``), metrics stacked by step. A
    single step runs outside a loop (the host loop's steps: XLA:CPU's convolution gradients
    are slow in a loop body, see :attr:`~jaxflow.learn.learner.Learner.loop`)."""
    block = jax.tree.leaves(batch)[0].shape[0]
    chex.assert_tree_shape_prefix(batch, (block,))
    local = idx - jax.lax.axis_index(AXIS) * block

    def step(s: TrainState, rows: jax.Array) -> tuple[TrainState, Metrics]:
        return local_step(loss_fn, optimizer, s, jax.tree.map(lambda x: x[rows], batch))

    if local.shape[0] == 1:
        state, metrics = step(state, local[0])
        return state, jax.tree.map(lambda m: m[None], metrics)
    return jax.lax.scan(step, state, local)


def _sharded_steps(
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    mesh: Mesh,
    state: TrainState,
    batch: Mapping[str, jax.Array],
    idx: jax.Array,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """:func:`local_steps` on every device of ``mesh``: the state replicated, the batch in
    blocks, each minibatch's columns of ``idx`` split by device; per-sample metrics
    ``[steps, minibatch]`` in the minibatch's order."""
    run = jax.shard_map(
        functools.partial(local_steps, loss_fn, optimizer),
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec(AXIS), PartitionSpec(None, AXIS)),
        out_specs=(PartitionSpec(), (PartitionSpec(), PartitionSpec(None, AXIS))),
    )
    state, (scalars, per_sample) = run(state, dict(batch), idx)
    return state, dict(scalars, **per_sample)


def _equal_parts(n: int, minibatch_size: int, num_devices: int) -> None:
    # Each device's loss is the mean over its part: their mean is the minibatch's mean only
    # when the parts are equal.
    assert n % num_devices == 0 and minibatch_size % num_devices == 0, (n, minibatch_size, num_devices)


def flat_sgd_update(
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    num_epochs: int,
    minibatch_size: int | None,
    state: TrainState,
    batch: Mapping[str, jax.Array],
    mesh: Mesh,
    move_by: jax.Array | None = None,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """:func:`~jaxflow.learn.sgd.sgd_update` for a batch sharded over ``mesh``, its steps in
    blocks under ``shard_map`` with one flat all-reduce each (see the module docstring).
    Where the minibatches cannot be in blocks (``shard_blocks`` is 1) it is ``sgd_update``
    with whole minibatches, as the batch gathered onto every device wants."""
    n = jax.tree.leaves(batch)[0].shape[0]
    chex.assert_tree_shape_prefix(batch, (n,))
    mb = _check_minibatch(n, minibatch_size)
    shards = shard_blocks(n, num_epochs, mb, mesh.size)
    if shards == 1:
        return sgd_update(loss_fn, optimizer, num_epochs, minibatch_size, state, batch, mesh.size, move_by)
    _equal_parts(n, mb, mesh.size)
    rng, idx = shuffle_minibatches(state.rng, n, num_epochs, mb, shards)
    state, metrics = _sharded_steps(loss_fn, optimizer, mesh, state._replace(rng=rng), batch, idx)
    if move_by is not None:
        state = move_target(state, move_by)
    return state, summarize_metrics(metrics, num_epochs)


def flat_minibatch_step(
    loss_fn: AnyLoss,
    optimizer: optax.GradientTransformation,
    batch: Mapping[str, jax.Array],
    state: TrainState,
    idx: jax.Array,
    num_shards: int,
    mesh: Mesh,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """:func:`~jaxflow.learn.sgd.minibatch_step` (one step of the host loop) with the flat
    all-reduce, for minibatch indices in ``mesh.size`` blocks; ``minibatch_step`` for others."""
    if num_shards == 1:
        return minibatch_step(loss_fn, optimizer, batch, state, idx, num_shards)
    _equal_parts(jax.tree.leaves(batch)[0].shape[0], idx.shape[0], mesh.size)
    state, metrics = _sharded_steps(loss_fn, optimizer, mesh, state, batch, idx[None])
    return state, {k: m[0] for k, m in metrics.items()}
