"""Checkpoint -> new process -> resume, and interrupted writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api import checkpoint, checkpoint_state, cli
from jaxflow.api.restore import run_directory

SMALL = dict(num_envs_per_worker=4, rollout_fragment_length=32, train_batch_size=256, num_workers=2, seed=3)

# Restores a checkpoint in a fresh interpreter (no Ray) and compares every leaf of
# the learner state and the counters with what the saving process wrote down.
COMPARE = r"""
import json, sys, numpy as np, jax
from jaxflow.api import checkpoint, checkpoint_state, cli
from jaxflow.api.restore import run_directory
from jaxflow.api.ray_program import build_learner
from jaxflow.api.registry import get_algorithm
from jaxflow.config import from_json_dict
path, expected = sys.argv[1], np.load(sys.argv[2])
meta = checkpoint.load_meta(path)
spec = get_algorithm(meta["algorithm"])
_, learner = build_learner(from_json_dict(spec.config_cls, meta["config"]), spec)
state = jax.device_get(checkpoint_state.restore_state(path, learner.state))
leaves = jax.tree_util.tree_leaves(state)
assert len(leaves) == len(expected.files), (len(leaves), len(expected.files))
bad = [i for i, x in enumerate(leaves) if not (x.dtype == expected[f"arr_{i}"].dtype and np.array_equal(x, expected[f"arr_{i}"]))]
print(json.dumps({"mismatched_leaves": bad, "counters": meta["context"]["counters"]}))
"""


def test_restore_in_new_process_is_bit_exact(ray_local, tmp_path):
    algo = Algorithm.build("A2C", **SMALL)
    try:
        for _ in range(3):
            algo.train()
        path = algo.save(str(tmp_path))
        saved = jax.device_get(algo.learner.state)
        counters = dict(algo.context.counters)
    finally:
        algo.stop()
    np.savez(tmp_path / "expected.npz", *jax.tree_util.tree_leaves(saved))
    out = subprocess.run(
        [sys.executable, "-c", COMPARE, path, str(tmp_path / "expected.npz")],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["mismatched_leaves"] == []
    assert report["counters"] == counters
    assert int(saved.step) == 3  # one optimizer step per A2C iteration here


def test_cli_resume_continues_the_run(ray_local, tmp_path):
    """The run trains in this process; ``--resume`` continues it in a new one (nothing but
    the files carries over)."""
    logdir = str(tmp_path / "run")
    common = ["train", "--quiet", "--checkpoint-every", "5"]
    first = [*common, "--algo", "PPO", "--num-workers", "2", "--seed", "0", "--stop", "training_iteration=25"]
    assert cli.main([*first, "--logdir", logdir]) == 0
    resume = [sys.executable, "-m", "jaxflow.api.cli", *common, "--resume", logdir, "--stop", "training_iteration=35"]
    subprocess.run(resume, check=True, capture_output=True)
    rows = [json.loads(line) for line in open(os.path.join(logdir, "progress.jsonl"))]
    iters = [r["training_iteration"] for r in rows]
    assert iters == list(range(1, 36))  # iterations carry on from 26, none repeated
    steps = [r["env_steps_sampled"] for r in rows]
    assert steps == sorted(steps) and steps[25] == steps[24] + 1024
    times = [r["time_s"] for r in rows]
    assert times[25] >= times[24]  # wall time carries across the resume
    # The policy is not reset: returns after resuming stay near where they were.
    before, after = rows[24]["episode_return_mean"], np.mean([r["episode_return_mean"] for r in rows[25:]])
    assert before > 100 and after > 0.7 * before, (before, after)
    assert os.path.basename(checkpoint.latest(logdir)) == "checkpoint_000035"
    # Checkpoints every 5 iterations and at the end, of which the newest 3 and the best stay
    # (the best judged across both processes' progress); TensorBoard events from both processes.
    names = os.listdir(logdir)
    kept = {n for n in names if n.startswith("checkpoint_")}
    best = json.load(open(os.path.join(logdir, "best_checkpoint.json")))
    assert {"checkpoint_000025", "checkpoint_000030", "checkpoint_000035"} <= kept and best["checkpoint"] in kept
    assert kept <= {f"checkpoint_{i:06d}" for i in range(5, 36, 5)} and len(kept) <= 4
    assert best["score"] == max(r["episode_return_mean"] for r in rows if r["training_iteration"] % 5 == 0)
    assert sum(n.startswith("events.out.tfevents") for n in names) == 2
    saved = json.load(open(os.path.join(logdir, "config.json")))
    assert saved["algorithm"] == "PPO" and saved["config"]["rollout"]["num_workers"] == 2


def test_interrupted_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    state = {"w": np.arange(4, dtype=np.float32)}
    meta = {"algorithm": "DQN", "config": {}, "context": {}}
    first = checkpoint.save(str(tmp_path), 1, state, meta)

    def fail(*args, **kwargs):
        raise KeyboardInterrupt("interrupted mid-write")

    monkeypatch.setattr(checkpoint, "_write_meta", fail)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(str(tmp_path), 2, {"w": np.ones(4, np.float32)}, meta)
    # A process killed mid-write leaves its temporary directory behind; it must be ignored too.
    os.makedirs(tmp_path / ".tmp-checkpoint_000003-deadbeef" / "state")
    assert checkpoint.latest(str(tmp_path)) == first
    restored = checkpoint_state.restore_state(first, state)
    np.testing.assert_array_equal(restored["w"], state["w"])
    assert sorted(os.listdir(tmp_path)) == [".tmp-checkpoint_000003-deadbeef", "checkpoint_000001"]
    assert sorted(os.listdir(first)) == ["manifest.json", "meta.json", "state"]


def test_checkpoint_format_version_is_checked(tmp_path):
    path = checkpoint.save(str(tmp_path), 1, {"w": np.zeros(2, np.float32)}, {})
    meta = json.load(open(os.path.join(path, "meta.json")))
    meta["format_version"] = 999
    json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
    with pytest.raises(checkpoint.CheckpointError, match="format 999"):
        checkpoint.load_meta(path)


GYMNAX = ["--algo", "PPO", "--env", "gymnax/CartPole-v1"] + [
    f"--set={kv}" for kv in ("num_envs=4", "rollout_fragment_length=16", "minibatch_size=32", "iterations_per_call=1")
]


def test_resuming_from_a_checkpoint_folder_continues_its_run(tmp_path, capsys):
    run = str(tmp_path / "run")
    argv = ["train", "--quiet", "--checkpoint-every", "1"]
    assert cli.main([*argv, *GYMNAX, "--stop", "training_iteration=2", "--logdir", run]) == 0
    first = os.path.join(run, "checkpoint_000001")
    # The run has a newer checkpoint than the one named: refused, pointing at the run.
    assert cli.main([*argv, "--resume", first, "--stop", "training_iteration=3"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"{run} has newer checkpoints (checkpoint_000002); resume with --resume {run}" in err
    )
    second = os.path.join(run, "checkpoint_000002")
    assert run_directory(second) == run and run_directory(run) == run
    assert cli.main([*argv, "--resume", second, "--stop", "training_iteration=3"]) == 0
    assert f"resuming PPO from {second}" in capsys.readouterr().out
    # Logs and the new checkpoint went to the run, nothing into the checkpoint resumed from.
    assert sorted(n for n in os.listdir(run) if n.startswith("checkpoint_")) == [
        "checkpoint_000001",
        "checkpoint_000002",
        "checkpoint_000003",
    ]
    checkpoint.verify(second)
    rows = [json.loads(line) for line in open(os.path.join(run, "progress.jsonl"))]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
