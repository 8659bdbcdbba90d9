"""IMPALA (Espeholt et al., 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures"): actors sample with possibly stale weights, and a
learner thread corrects for the lag with V-trace off-policy targets. With ``use_lstm`` (Ray
mode) the loss unrolls the recurrent policy over each fragment from the state it started
from, reset where episodes start (:mod:`jaxflow.policies.sequences`), as the paper's agents do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import rlax

from jaxflow import (
    AlgorithmSpec,
    BroadcastWeights,
    CommonConfig,
    ConcatBatches,
    Concurrently,
    Dequeue,
    DeviceSpec,
    Enqueue,
    ParallelRollouts,
    ReportMetrics,
    RunHooks,
    WorkerHooks,
    register_algorithm,
)
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import COUNT, NON_NEGATIVE, POSITIVE, SIZE, UNIT, param, require
from jaxflow.learn.to_device import ToDevice
from jaxflow.policies import Policy
from jaxflow.policies.sequences import SEQUENCE_FIELDS, STARTS_FIELD, STATE_FIELD
from jaxflow.replay.stacks import encode_stacks
from jaxflow.rollout import batch as fragments

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class IMPALAConfig(CommonConfig):
    """IMPALA settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    learner_group = True
    loss_fields: ClassVar[tuple[str, ...]] = ("vf_coef", "ent_coef")
    recurrent_modes: ClassVar[tuple[str, ...]] = ("ray",)
    asynchronous_plan: ClassVar[str] = (
        "actors act with whatever weights last reached them while a learner thread trains on "
        "fragments in the order they arrive"
    )

    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(rollout_fragment_length=32))
    """Actors (see :class:`~jaxflow.config.RolloutConfig`); 32-step fragments, over which V-trace runs."""
    train_batch_size: int = param(512, SIZE)
    """Env steps per learner update; fragments are joined until there are at least this many."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3))
    """Adam (see :class:`~jaxflow.config.OptimizerConfig`); IMPALA's learning rate is 1e-3."""
    vtrace_lambda: float = param(1.0, UNIT)
    """V-trace's lambda (1 is the paper's setting)."""
    clip_rho_threshold: float = param(1.0, POSITIVE)
    """rho-bar: truncation of the importance weights in the value targets."""
    clip_pg_rho_threshold: float = param(1.0, POSITIVE)
    """Truncation of the importance weights in the policy-gradient advantages."""
    vf_coef: float = param(0.5, NON_NEGATIVE)
    """Weight of the value loss."""
    ent_coef: float = param(0.01, NON_NEGATIVE)
    """Weight of the entropy bonus."""
    broadcast_interval: int = param(1, SIZE)
    """Learner updates between two weight broadcasts to every actor."""
    num_async: int = param(2, SIZE)
    """Sample requests in flight per actor."""
    learner_queue_size: int = param(4, SIZE)
    """Train batches waiting for the learner thread."""
    prefetch_batches: int = param(2, SIZE)
    """Train batches already transferred to the learner's devices ahead of the learner thread."""
    min_env_steps_per_iteration: int = param(10_000, COUNT)
    """Env steps sampled per reported training iteration."""
    send_frames_once: bool = param(True)
    """Frame-stack observations ([k, H, W], k >= 2) travel from the actors to the learner as
    each frame once (k times fewer bytes through the object store and to the devices), and
    the learner rebuilds the stacks on its devices (see ``jaxflow.replay.stacks.encode_stacks``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.rollout.num_workers >= 1, f"{type(self).__name__}.num_workers must be >= 1: the actors are Ray actors."
        )


def vtrace(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> tuple[Array, Array]:
    """V-trace value targets ``v_s`` and policy-gradient advantages of time-major ``[T, B]``
    arrays (Espeholt et al., 2018, Section 4.1), through rlax, vmapped over the batch.

    ``discount_t`` is 0 where an episode terminated (no bootstrap); a truncation's bootstrap
    value is already in its reward (see ``RolloutWorker.sample``). Targets carry no gradient.
    """
    chex.assert_rank([v_tm1, v_t, r_t, discount_t, rho_tm1], 2)
    chex.assert_equal_shape([v_tm1, v_t, r_t, discount_t, rho_tm1])
    out = jax.vmap(rlax.vtrace_td_error_and_advantage, in_axes=(1, 1, 1, 1, 1, None, None, None), out_axes=1)(
        v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_, clip_rho_threshold, clip_pg_rho_threshold
    )
    return out.errors + v_tm1, out.pg_advantage


def postprocess(traj: Mapping[str, Array], config: Any) -> dict[str, Array]:
    """Worker-side: keeps what V-trace needs (and a recurrent policy's sequence fields); the
    behaviour policy travels as ``log mu(a|x)``."""
    keep = ("obs", "actions", "logp", "rewards", "discounts", "last_obs", *(k for k in SEQUENCE_FIELDS if k in traj))
    return {k: traj[k] for k in keep}


def encode(traj: Mapping[str, Any], config: IMPALAConfig) -> dict[str, Any]:
    """Worker-side, on the host: frame stacks as ``frames`` and ``stack_index`` in place of
    ``obs`` and ``last_obs`` (with ``send_frames_once``; see :func:`rebuild_stacks`)."""
    obs = traj["obs"]
    if not config.send_frames_once or obs.ndim != 5 or obs.shape[2] < 2:
        return dict(traj)
    frames, index = encode_stacks(obs, traj["last_obs"])
    rest = {k: v for k, v in traj.items() if k not in ("obs", "last_obs")}
    return {**rest, "frames": frames, "stack_index": index}


def rebuild_stacks(frames: Array, stack_index: Array) -> Array:
    """Batch-major frame stacks ``[B, T + 1, k, H, W]`` (the fragment's observations, then
    the one after it) from ``frames [B, T + k, H, W]`` and ``stack_index [B, T + 1, k]`` as
    ``jaxflow.replay.stacks.encode_stacks`` makes them (time-major there); index -1 is an
    all-zero frame."""
    chex.assert_rank([frames, stack_index], [4, 3])
    chex.assert_equal_shape_prefix([frames, stack_index], 1)

    def one_sequence(f: Array, idx: Array) -> Array:
        stacks = f[jnp.maximum(idx, 0)]
        return jnp.where((idx >= 0)[..., None, None], stacks, jnp.zeros((), f.dtype))

    return jax.vmap(one_sequence)(frames, stack_index)


def batch_major(data: Mapping[str, Any], config: Any = None) -> dict[str, Any]:
    """A fragment's fields (``[T, B, ...]``, numpy or JAX) as the learner takes them:
    sequences along the leading axis, ``[B, T, ...]``, so the learner can shard and split
    the batch by sequence; the loss turns it back to time-major."""
    del config
    return fragments.batch_major(data)


def unrolled_outputs(params: Any, batch: Mapping[str, Array], policy: Policy) -> tuple[Array, Array]:
    """A recurrent policy's time-major distribution inputs ``[T, B, D]`` and values ``[T + 1, B]``:
    unrolled over each sequence from its stored ``policy_state``, reset where episodes start,
    and the value of the observation after the fragment from the state the sequence reached."""
    obs, starts = jnp.swapaxes(batch["obs"], 0, 1), jnp.swapaxes(batch[STARTS_FIELD], 0, 1)
    state, inputs, values = policy.unroll(params, batch[STATE_FIELD], obs, starts)
    last = policy.value_after(params, state, batch["last_obs"])
    return inputs, jnp.concatenate([values, last[None]])


def applied_outputs(params: Any, batch: Mapping[str, Array], policy: Policy) -> tuple[Array, Array]:
    """A feed-forward policy's time-major distribution inputs ``[T, B, D]`` and values
    ``[T + 1, B]``: one ``apply`` on every observation and the one after the fragment."""
    if "frames" in batch:
        all_obs = rebuild_stacks(batch["frames"], batch["stack_index"])
    else:
        all_obs = jnp.concatenate([batch["obs"], batch["last_obs"][:, None]], axis=1)
    B, T1 = all_obs.shape[:2]
    inputs, values = policy.apply(params, all_obs.reshape((B * T1,) + all_obs.shape[2:]))
    # Time-major, the step after the fragment dropped.
    inputs = jnp.swapaxes(inputs.reshape(B, T1, -1), 0, 1)[:-1]
    return inputs, jnp.swapaxes(values.reshape(B, T1), 0, 1)


def evaluate_sequences(params: Any, batch: Mapping[str, Array], policy: Policy) -> tuple[Array, Array, Array]:
    """Time-major ``logp(a_t|x_t)``, entropy ``[T, B]`` under ``params`` and values ``[T + 1, B]``
    (the last is the bootstrap value of the observation after the fragment)."""
    B, T = batch["actions"].shape[:2]
    outputs = unrolled_outputs if policy.recurrent else applied_outputs
    inputs, values = outputs(params, batch, policy)
    inputs = inputs.reshape(T * B, -1)  # flat for the distribution
    actions = jnp.swapaxes(batch["actions"], 0, 1).reshape(T * B, *batch["actions"].shape[2:])
    dist = policy.distribution
    return dist.log_prob(inputs, actions).reshape(T, B), dist.entropy(inputs).reshape(T, B), values


def vtrace_targets(batch: Mapping[str, Array], logp_t: Array, values: Array, config: Any) -> tuple[Array, Array, Array]:
    """``(v_s, pg_advantages, log_rho)`` of a batch-major train batch, time-major ``[T, B]``."""
    log_rho = logp_t - jnp.swapaxes(batch["logp"], 0, 1)
    vs, adv = vtrace(
        values[:-1],
        values[1:],
        jnp.swapaxes(batch["rewards"], 0, 1),
        jnp.swapaxes(batch["discounts"], 0, 1),
        jnp.exp(log_rho),
        config.vtrace_lambda,
        config.clip_rho_threshold,
        config.clip_pg_rho_threshold,
    )
    return jax.lax.stop_gradient(vs), jax.lax.stop_gradient(adv), log_rho


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, *, policy: Policy, config: IMPALAConfig
) -> tuple[Array, dict[str, Array]]:
    """IMPALA's loss: policy gradient with V-trace advantages + value regression to the
    V-trace targets - entropy bonus."""
    del rng
    logp_t, entropy_t, values = evaluate_sequences(params, batch, policy)
    vs, adv, log_rho = vtrace_targets(batch, logp_t, values, config)
    pg_loss = -jnp.mean(logp_t * adv)
    value_loss = 0.5 * jnp.mean(jnp.square(vs - values[:-1]))
    entropy = jnp.mean(entropy_t)
    total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return total, {
        "policy_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "mean_rho": jnp.mean(jnp.exp(log_rho)),
    }


def sequence_rows(batch: fragments.SampleBatch) -> dict[str, Any]:
    """The learner's rows of a fragment: its ``B`` sequences ``[B, T, ...]`` (V-trace runs along time)."""
    return batch_major(batch.data)


def plan(workers, learner, config: IMPALAConfig):
    thread = learner.start_thread(inqueue_size=config.learner_queue_size, outqueue_size=config.learner_queue_size)
    # (1) actors sample with whatever weights they have; fragments join into train batches, which
    #     a feeding thread places on the learner's devices ahead of the learner thread
    #     (a learner group's processes fetch the rows from the actors' nodes themselves)
    rollouts = ParallelRollouts(
        workers, mode="async", num_async=config.num_async, to_learner=learner, to_host=sequence_rows
    )
    batches = rollouts.combine(ConcatBatches(config.train_batch_size))
    feed = ToDevice(batches, learner, to_host=sequence_rows, prefetch=config.prefetch_batches).for_each(Enqueue(thread))
    # (2) after every broadcast_interval updates, all actors get the new weights (one object-store put)
    update = Dequeue(thread).for_each(BroadcastWeights(learner, workers, every_n=config.broadcast_interval))
    return ReportMetrics(
        Concurrently([feed, update], mode="async", output_indexes=[1]), workers, config.min_env_steps_per_iteration
    )


IMPALA = register_algorithm(
    AlgorithmSpec(
        "IMPALA",
        IMPALAConfig,
        loss,
        plan,
        postprocess,
        workers=WorkerHooks(encode=encode),
        run=RunHooks(device=DeviceSpec(prepare=batch_major)),
    )
)
