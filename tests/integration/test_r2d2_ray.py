"""R2D2 in Ray mode: two actors with Ape-X's epsilons, each storing its fragments on its own
sequence shard, the learner thread on Ape-X's plan sending sequence priorities back; a
checkpoint holds the learner and the shards' rings, which a new shard takes back as they
were, and ``jaxflow evaluate`` plays it.

A second Ray program (``Algorithm.restore``) would start four more actors: about 19 s more
here on a loaded 2-core machine. The parts it would run are the generic ones (the learner's
state, ``ReplayShards.load``) and the sequence shard's ``import_state``, run here in-process."""

from __future__ import annotations

import io
import json
import os

import jax
import numpy as np
import ray

from jaxflow import Algorithm
from jaxflow.algorithms import r2d2
from jaxflow.algorithms.r2d2 import SequenceShard
from jaxflow.api import checkpoint_state, cli
from jaxflow.replay.saved import RECORD_KEY, shard_path

SHORT = dict(
    mode="ray",
    env="jaxflow/StatelessCartPole-v1",
    num_workers=2,
    num_replay_shards=2,
    num_envs_per_worker=2,
    lstm_size=8,
    hidden_sizes=(16,),
    train_batch_size=8,
    replay_batch_size=16,
    buffer_size=512,  # no sequence is overwritten in this test: the priorities sent back stay
    learning_starts=4,
    min_env_steps_per_iteration=100,
    max_weight_sync_delay=10**9,  # the actors keep the initial weights: their greedy actions can be recomputed
    seed=3,
)
MAX_ITERATIONS = 6
"""Iterations of 100 env steps the learner may take to send priorities to both shards."""


def make_shard(config, index: int) -> SequenceShard:
    """Shard ``index`` of ``config``'s run, in this process."""
    alpha = config.prioritized_replay_alpha
    return SequenceShard(config.replay_shard_capacity, alpha, index=index, **r2d2.shard_options(config))


def ring(data: bytes) -> dict[str, np.ndarray]:
    """A shard's exported sequence ring, by array name."""
    with np.load(io.BytesIO(data)) as f:
        return {k.removeprefix("buffer/"): f[k] for k in f.files if k.startswith("buffer/")}


def reprioritized(saved: dict[str, np.ndarray]) -> bool:
    """Whether the learner's priorities reached the shard: new sequences all enter with the
    same (the largest so far), so its live priorities differ only once some came back."""
    live = saved["priorities"][saved["priorities"] > 0]
    return len(np.unique(live)) > 1


def non_greedy_share(algo: Algorithm, params, saved: dict[str, np.ndarray]) -> float:
    """The share of a shard's stored steps whose action is not the greedy one of ``params``,
    each block of steps unrolled from the state stored at its start."""
    policy, period = algo.program.policy, algo.config.sequence_period
    treedef = jax.tree.structure(policy.initial_state(1))
    unroll, differ = jax.jit(policy.unroll), []
    for b in range(min(int(saved["blocks"][0]), len(saved["priorities"]))):  # the blocks written
        rows = slice(b * period, (b + 1) * period)
        state = jax.tree.unflatten(treedef, [saved[f"start_states/{i}"][b] for i in range(treedef.num_leaves)])
        q = unroll(params, state, saved["steps/obs"][rows], saved["steps/episode_starts"][rows])[1]
        differ.append(np.asarray(q).argmax(-1) != saved["steps/actions"][rows])
    return float(np.mean(differ))


def test_r2d2_trains_from_two_actors_on_sequence_shards_and_checkpoints(ray_local, tmp_path, capsys):
    algo = Algorithm.build("R2D2", **SHORT)
    try:
        initial = jax.device_get(algo.learner.get_weights())
        for _ in range(MAX_ITERATIONS):  # until the learner's priorities reached both shards
            result = algo.train()
            if all(reprioritized(ring(ray.get(s.export_state.remote()))) for s in algo.program.replay.actors):
                break
        path = algo.save(str(tmp_path))
        template = algo.program.get_state()
    finally:
        algo.stop()
    assert algo.mode == "ray" and result["env_steps_trained"] > 0 and np.isfinite(result["learner"]["loss"])
    files = [open(shard_path(path, i), "rb").read() for i in range(2)]
    saved = [ring(f) for f in files]
    assert all(reprioritized(rings) for rings in saved)
    # Shard i holds actor i alone: Ape-X's epsilons 0.4 and 0.4^8 make about 20% and 0.03% of
    # its actions non-greedy (2 actions); each share is of 50-300 steps.
    assert 0.1 < non_greedy_share(algo, initial, saved[0]) < 0.3
    assert non_greedy_share(algo, initial, saved[1]) < 0.02
    # The checkpoint's learner has trained; each shard's file loads into a new shard as it was saved.
    params = checkpoint_state.restore_state(path, template).params
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(initial)))
    record = json.load(open(os.path.join(path, "meta.json")))[RECORD_KEY]
    for i, data in enumerate(files):
        shard = make_shard(algo.config, i)
        assert shard.import_state(data) == record[i]["size"] > 0
        for k, v in ring(shard.export_state()).items():
            np.testing.assert_array_equal(v, saved[i][k])
    assert cli.main(["evaluate", "--checkpoint", path, "--episodes", "2"]) == 0
    assert "greedy return over 2 episodes" in capsys.readouterr().out
