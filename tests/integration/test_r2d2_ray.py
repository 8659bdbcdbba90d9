"""R2D2 in Ray mode: two actors with Ape-X's epsilons, each storing its fragments on its own
sequence shard, the learner thread on Ape-X's plan sending sequence priorities back; a
checkpoint restores the learner and the shards' rings."""

from __future__ import annotations

import io
import os

import jax
import numpy as np
import ray

from jaxflow import Algorithm
from jaxflow.api import checkpoint, cli
from jaxflow.replay.saved import shard_path

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
    buffer_size=64,
    learning_starts=4,
    min_env_steps_per_iteration=200,
    max_weight_sync_delay=10**9,  # the actors keep the initial weights: their greedy actions can be recomputed
    seed=3,
)


def ring(data: bytes) -> dict[str, np.ndarray]:
    """A shard's exported sequence ring, by array name."""
    with np.load(io.BytesIO(data)) as f:
        return {k.removeprefix("buffer/"): f[k] for k in f.files if k.startswith("buffer/")}


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


def test_r2d2_trains_from_two_actors_on_sequence_shards_and_restores(ray_local, tmp_path, capsys):
    algo = Algorithm.build("R2D2", **SHORT)
    try:
        initial = jax.device_get(algo.learner.get_weights())
        for _ in range(2):
            result = algo.train()
        path = algo.save(str(tmp_path))
    finally:
        algo.stop()
    assert algo.mode == "ray" and result["env_steps_trained"] > 0 and np.isfinite(result["learner"]["loss"])
    saved = [ring(open(shard_path(path, i), "rb").read()) for i in range(2)]
    # Shard i holds actor i alone: Ape-X's epsilons 0.4 and 0.4^8 make about 20% and 0.03% of
    # its actions non-greedy (2 actions); each share is of 100-200 steps.
    assert 0.1 < non_greedy_share(algo, initial, saved[0]) < 0.3
    assert non_greedy_share(algo, initial, saved[1]) < 0.02
    for rings in saved:  # the learner's priorities came back: not only new sequences' max priority
        live = rings["priorities"][rings["priorities"] > 0]
        assert len(np.unique(live)) > 1
    restored = Algorithm.restore(path)
    try:
        template = restored.program.get_state()
        for a, b in zip(
            jax.tree.leaves(checkpoint.restore_state(path, template)), jax.tree.leaves(template), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        back = [ring(ray.get(s.export_state.remote())) for s in restored.program.replay.actors]
    finally:
        restored.stop()
    for before, after in zip(saved, back, strict=True):
        assert before.keys() == after.keys()
        for k in before:
            np.testing.assert_array_equal(before[k], after[k])
    assert os.path.exists(shard_path(path, 1))
    assert cli.main(["evaluate", "--checkpoint", path, "--episodes", "2"]) == 0
    assert "greedy return over 2 episodes" in capsys.readouterr().out
