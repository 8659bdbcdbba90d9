"""Seed offsets, the largest seed, timeouts and evaluation's bounds, named in one place.

Seeds: every random stream of a run derives from ``config.seed`` by these offsets, so runs
are reproducible and no two streams coincide. Timeouts: how long the engine waits for
actors and threads before it reports them as failed or moves on.
"""

from __future__ import annotations

MAX_SEED = 2**30 - 1
"""The largest seed a run or an evaluation takes (1,073,741,823; seeds are 0 or more). The
seeds derived from it (each worker's, each restart's, evaluation's and PBT's offsets below, a
device run's seed + member) must stay below 2**31, the int32 seeds ALE's and envpool's C++
vector envs take, and JAX keeps only a seed's low 32 bits: half of int32's range is left to
the offsets (about a thousand restarts of a worker, or a hundred thousand workers)."""

WORKER_SEED_STRIDE = 10_000
"""Seed distance between rollout workers: env ``j`` of worker ``i`` is seeded
``seed + i * WORKER_SEED_STRIDE + j`` (room for that many envs per worker)."""

INCARNATION_SEED_STRIDE = 1_000_000
"""Seed distance between incarnations of a restarted worker, so that a replacement does not
replay the episodes its predecessor already sampled."""

EVALUATION_SEED_OFFSET = 7_777_777
"""Evaluation episodes are seeded this far from training's by default."""

PBT_SEED_OFFSET = 5_050_505
"""Population-based training's exploit and explore choices at iteration ``i`` are drawn from
the stream seeded ``(seed + PBT_SEED_OFFSET, i)``: reproducible, and the same after a resume."""

STARTUP_TIMEOUT_S = 180.0
"""How long a new actor may take to answer (a fresh process imports JAX)."""

ACTOR_STOP_TIMEOUT_S = 30.0
"""How long stopping waits for killed actors to be gone."""

GRACEFUL_EXIT_S = 3.0
"""How long stopping waits for rollout workers asked to exit (after the call in hand) before it
kills those still there."""

THREAD_JOIN_TIMEOUT_S = 30.0
"""How long stopping waits for a plan's background threads."""

MAX_EVALUATION_EPISODES = 100_000
"""The most episodes one evaluation plays (``jaxflow evaluate --episodes``, ``evaluation_episodes``):
each is played to its end and its return kept, and beyond this a typo (``--episodes 10**12``)
would play for years rather than fail."""

EVALUATION_PROGRESS_S = 10.0
"""How often ``jaxflow evaluate`` says how many episodes it has played, once it has played for this long."""

POLL_S = 0.5
"""How often a blocking wait on a queue re-checks whether it should give up."""

MAX_START_ATTEMPTS = 3
"""Times a restarted worker or shard is created before its failure to start ends the run: a
node that was leaving as the actor was placed there takes an attempt."""

FREE_CPU_PATIENCE_S = 15.0
"""How long starting workers waits for the CPUs of actors killed a moment ago."""


def worker_seed(seed: int, index: int, incarnation: int = 0) -> int:
    """The base seed of rollout worker ``index`` in its ``incarnation``-th life.

    Example:
        >>> worker_seed(0, index=2, incarnation=1)
        1020000
    """
    return seed + WORKER_SEED_STRIDE * index + INCARNATION_SEED_STRIDE * incarnation


# Standard result keys (DESIGN.md): here, with the constants, so that writers and the command
# line name them without importing the engine's operators.
ENV_STEPS_SAMPLED = "env_steps_sampled"
ENV_STEPS_TRAINED = "env_steps_trained"
NUM_UPDATES = "num_updates"
NUM_WEIGHT_SYNCS = "num_weight_syncs"
TRAINING_ITERATION = "training_iteration"
"""Rollout-and-update iterations so far, the same unit in every kind of run."""
