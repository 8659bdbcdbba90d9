"""R2D2 in Ray mode (Kapturowski et al., 2019, Section 2: many actors with Ape-X's epsilons,
one replay of sequences with their stored recurrent state, one learner): Ape-X's plan, run
with replay shard actors whose store is the sequence ring of
:mod:`jaxflow.algorithms.r2d2.replay`, the very functions device mode runs, jitted for the
shard's CPU, and the learner thread training on the replayed sequences with device mode's loss.

Actor ``i``'s fragments all go to shard ``i % S`` (``StoreToReplay(by_actor=True)``), in
order, where they fill lane ``i // S`` of the shard's ring: each step is stored once, and a
sequence runs on from one of the actor's fragments into the next as in device mode.
Sampling and priorities see all the shard's lanes as one ring, so sequences are drawn in
proportion to their priorities over the whole shard. The rate limiter weighs the env steps
inserted (each stored once) against the sequences replayed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxflow import LocalReplay, ReplayShards, envs, replay_in_driver
from jaxflow.algorithms.apex import plan as apex_plan
from jaxflow.algorithms.dqn.replay import shard_actors, shard_settings
from jaxflow.algorithms.r2d2.config import R2D2Config
from jaxflow.algorithms.r2d2.program import STORED_FIELDS, r2d2_policy
from jaxflow.algorithms.r2d2.replay import SequenceReplayState, sequence_buffer
from jaxflow.policies import Policy
from jaxflow.policies.sequences import STARTS_FIELD, STATE_FIELD
from jaxflow.replay.shard import ReplayShard

SEED_BOUND = 2**31
"""Sampling keys are drawn below this from the shard's checkpointed numpy generator."""


def forget(state: SequenceReplayState, lane: Any, block: Any, width: int) -> SequenceReplayState:
    """The ring with the sequences of the lane's ``width`` envs starting at ``block`` never
    sampled (priority 0): they run across a break in the lane's stream of fragments."""
    zeros = jnp.zeros((1, width), state.priorities.dtype)
    return state._replace(priorities=jax.lax.dynamic_update_slice(state.priorities, zeros, (block, lane * width)))


@functools.cache
def compiled_ring(burn_in: int, trace_length: int, sequence_period: int) -> tuple[Any, Any, Any, Any]:
    """``add``, ``sample``, ``update_priorities`` and :func:`forget` of the ring, jitted once per
    process and sequence shape (the state donated to the changes: written in place)."""
    functions = sequence_buffer(burn_in, trace_length, sequence_period)
    return (
        jax.jit(functions.add, donate_argnums=0),
        jax.jit(functions.sample, static_argnums=2),
        jax.jit(functions.update_priorities, donate_argnums=0),
        jax.jit(forget, donate_argnums=0, static_argnums=3),
    )


class SequenceRing:
    """One shard's sequence ring, a lane per actor routed to it, on this process's CPU
    (:func:`compiled_ring`); ``lengths`` are ``(burn_in, trace_length, sequence_period)``.

    After a break in a lane's stream (:meth:`break_off`: its actor was replaced, or the ring
    was restored from a checkpoint while actors went on) the ``k - 1`` sequences its next
    fragments complete would join steps that never followed each other (an n-step return
    summed across them): they enter with priority 0, never sampled."""

    def __init__(
        self, example: Mapping[str, Any], capacity: int, alpha: float, lanes: int, lengths: tuple[int, int, int]
    ):
        self.capacity, self.alpha = capacity, alpha
        self._treedef = jax.tree.structure(example[STATE_FIELD])
        self._num_leaves = len(jax.tree.leaves(example[STATE_FIELD]))
        burn_in, trace_length, period = lengths
        self.state: SequenceReplayState = sequence_buffer(burn_in, trace_length, period, lanes).init(example, capacity)
        self._add, self._sample, self._update, self._forget = compiled_ring(*lengths)
        self._spanning = (burn_in + trace_length) // period - 1  # sequences that span a break, per lane
        self._breaks = np.zeros(lanes, int)  # sequences still to complete across a break, per lane

    def __len__(self) -> int:
        return int(self.state.size)

    @property
    def nbytes(self) -> int:
        return sum(x.nbytes for x in jax.tree.leaves(self.state))

    def add(self, fragment: Mapping[str, Any], lane: int) -> None:
        num_blocks, width = self.state.priorities.shape[0], np.shape(fragment["actions"])[1]
        complete = (int(self.state.blocks[lane]) - self._spanning) % num_blocks  # the sequence this add completes
        self.state = self._add(self.state, fragment, self.alpha, lane)
        if self._breaks[lane]:
            self.state = self._forget(self.state, lane, complete, width)
            self._breaks[lane] -= 1

    def break_off(self, lane: int | None = None) -> None:
        """The stream of ``lane``'s fragments (None: every lane's) breaks off here."""
        self._breaks[slice(None) if lane is None else lane] = self._spanning

    def sample(self, batch_size: int, key: jax.Array, beta: float) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        return jax.device_get(self._sample(self.state, key, batch_size, beta))

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self.state = self._update(self.state, jnp.asarray(slots, jnp.int32), priorities, self.alpha)

    def get_state(self) -> dict[str, Any]:
        """The ring as named numpy arrays plus JSON numbers (``size`` and ``capacity`` too, what
        a checkpoint's record reads)."""
        state = jax.device_get(self.state)
        arrays = {f"steps/{k}": v for k, v in state.steps.items()}
        arrays.update({f"start_states/{i}": v for i, v in enumerate(jax.tree.leaves(state.start_states))})
        return dict(
            arrays,
            priorities=state.priorities,
            blocks=state.blocks,
            size=int(state.size),
            capacity=self.capacity,
            max_priority=float(state.max_priority),
        )

    def set_state(self, saved: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s output into a ring of the same shapes."""
        leaves = [saved[f"start_states/{i}"] for i in range(self._num_leaves)]
        steps = {k: saved[f"steps/{k}"] for k in self.state.steps}
        new = SequenceReplayState(
            steps,
            jax.tree.unflatten(self._treedef, leaves),
            saved["priorities"],
            saved["blocks"],
            jnp.asarray(saved["size"], jnp.int32),
            jnp.asarray(saved["max_priority"], jnp.float32),
        )
        shapes = [np.shape(x) for x in jax.tree.leaves(new)]
        if shapes != [x.shape for x in jax.tree.leaves(self.state)]:
            raise ValueError(
                f"saved sequence rings of shapes {shapes[:2]}..., this shard's are "
                f"{[x.shape for x in jax.tree.leaves(self.state)][:2]}...: the run's num_workers, "
                "num_envs_per_worker and sequence settings must be the checkpoint's"
            )
        self.state = jax.tree.map(jnp.asarray, new)


class SequenceShard(ReplayShard):
    """A :class:`~jaxflow.replay.shard.ReplayShard` (rate limiter, checkpoints, generations)
    holding a :class:`SequenceRing` with one lane per actor ``i`` with ``i % num_shards ==
    index``; ``example`` is one fragment's stored fields (zeros), which shape it. Its rate
    limiter holds back only the learner: a fragment left out would join its neighbours into
    sequences of steps that never followed each other, so inserts are always admitted (the
    oldest sequences are overwritten, as in the paper's replay without a limiter)."""

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.9,
        seed: int | np.random.SeedSequence = 0,
        index: int = 0,
        samples_per_insert: float | None = None,
        min_size_to_sample: int = 1,
        error_buffer: float = 0.0,
        generation: int = 0,
        *,
        example: Mapping[str, Any],
        num_actors: int,
        num_shards: int,
        lengths: tuple[int, int, int],
    ):
        if not 0 <= index < num_shards <= num_actors:
            raise ValueError(f"shard {index} of {num_shards} for {num_actors} actors: each shard needs an actor.")
        self.num_shards = num_shards
        self._replaced: dict[int, int] = {}  # per lane: how many times its actor was replaced
        self._ring_args = (example, len(range(index, num_actors, num_shards)), lengths)
        super().__init__(capacity, alpha, seed, index, samples_per_insert, min_size_to_sample, error_buffer, generation)

    def _new_buffer(self, capacity: int, alpha: float) -> SequenceRing:
        example, lanes, lengths = self._ring_args
        return SequenceRing(example, capacity, alpha, lanes, lengths)

    def _can_insert(self, n: int) -> bool:
        return True

    def _items(self, batch: Mapping[str, Any]) -> int:
        return int(np.prod(np.shape(batch["actions"])))  # the fragment's env steps, each stored once

    def _store(
        self, batch: Mapping[str, Any], priorities: np.ndarray | None, source: tuple[int, int] | None
    ) -> np.ndarray:
        actor, replaced = source if source is not None else (None, 0)
        if actor is None or actor % self.num_shards != self.index:
            raise ValueError(
                f"sequence shard {self.index}: a fragment from actor {actor}; actor i's fragments go to shard "
                f"i % {self.num_shards} (StoreToReplay(by_actor=True))"
            )
        lane = actor // self.num_shards
        if self._replaced.setdefault(lane, replaced) != replaced:  # a new actor: its envs started afresh
            self._buffer.break_off(lane)
            self._replaced[lane] = replaced
        self._buffer.add(batch, lane)
        return np.zeros(0, np.int64)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`ReplayShard.set_state`; every lane's stream breaks off there (the actors
        did not stop where the checkpoint did)."""
        super().set_state(state)
        with self._cond:
            self._buffer.break_off()
            self._replaced.clear()

    def _draw(self, batch_size: int, beta: float) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        key = jax.random.PRNGKey(int(self._rng.integers(SEED_BOUND)))
        return self._buffer.sample(batch_size, key, beta)


def example_fragment(config: R2D2Config, policy: Policy, obs_space: gymnasium.Space) -> dict[str, Any]:
    """Zeros shaped like one actor's fragment as the shards store it (``fragment_fields``)."""
    T, E = config.rollout.rollout_fragment_length, config.rollout.num_envs_per_worker
    obs = np.zeros((T, E, *(obs_space.shape or ())), envs.vector.obs_dtype(obs_space))
    steps = dict(obs=obs, actions=np.zeros((T, E), policy.distribution.action_dtype))
    steps.update(rewards=np.zeros((T, E), np.float32), discounts=np.zeros((T, E), np.float32))
    state = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(lambda: policy.initial_state(E)))
    return dict(steps, **{STARTS_FIELD: np.zeros((T, E), bool), STATE_FIELD: state})


def make_sequence_replay(config: R2D2Config) -> ReplayShards | LocalReplay:
    """``num_replay_shards`` sequence shards splitting ``buffer_size`` sequences, each actor's
    fragments on one of them; a rate limiter holding the learner to ``samples_per_insert``
    trained steps per env step (``spi / trace_length`` sequences replayed per env step
    inserted), the slack one actor's fragment after a full replay request. With
    ``replay_in_driver``: the one shard in the driver's process."""
    per_step = config.samples_per_insert / config.trace_length  # sequences replayed per env step
    fragment = config.rollout.num_envs_per_worker * config.rollout.rollout_fragment_length
    slack = per_step * fragment + config.distributed.replay_batch_size
    shard = dict(shard_settings(config, per_step, slack), shard_cls=SequenceShard, shard_options=shard_options(config))
    if replay_in_driver(config):
        return LocalReplay(**shard)
    return ReplayShards(config.num_replay_shards, **shard, **shard_actors(config))


def shard_options(config: R2D2Config) -> dict[str, Any]:
    """What a :class:`SequenceShard` of ``config``'s run takes besides a shard's own arguments."""
    env = envs.make_cpu(config.env, **config.env_config)
    obs_space, action_space = env.observation_space, env.action_space
    env.close()
    return dict(
        example=example_fragment(config, r2d2_policy(config, obs_space, action_space), obs_space),
        num_actors=config.rollout.num_workers,
        num_shards=config.num_replay_shards,
        lengths=(config.burn_in, config.trace_length, config.sequence_period),
    )


def encode(traj: Mapping[str, np.ndarray], config: R2D2Config) -> dict[str, np.ndarray]:
    """What an actor sends of its fragment: the steps' stored fields (the worker adds the start state)."""
    del config
    return {k: traj[k] for k in STORED_FIELDS if k in traj}


def fixed_importance(learner: Any, config: R2D2Config) -> float:
    """The paper's importance-sampling exponent, not annealed (0 without priorities)."""
    del learner
    return config.prioritized_replay_beta if config.prioritized_replay else 0.0


def plan(workers: Any, learner: Any, config: R2D2Config, replay: ReplayShards) -> Any:
    """Ape-X's plan with each actor's fragments on its own shard, in order, and a fixed exponent."""
    return apex_plan(workers, learner, config, replay, importance=fixed_importance, by_actor=True)
