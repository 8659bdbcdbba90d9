"""A run keeps its newest checkpoints and its best one; the rest go."""

from __future__ import annotations

import json
import os

import pytest

from jaxflow.api.retention import BEST_FILE, named_best, prune_checkpoints, scores_by_iteration
from jaxflow.config import ConfigError


def make_run(tmp_path, rows, checkpoints):
    with open(tmp_path / "progress.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    for i in checkpoints:
        os.makedirs(tmp_path / f"checkpoint_{i:06d}" / "state")
    return str(tmp_path)


def names(path):
    return sorted(n for n in os.listdir(path) if n.startswith("checkpoint_"))


def test_the_newest_and_the_best_stay(tmp_path):
    returns = {1: None, 2: 50.0, 3: 180.0, 4: 120.0, 5: 90.0, 6: 100.0}  # 1: no finished episode yet (null)
    run = make_run(tmp_path, [{"training_iteration": i, "episode_return_mean": r} for i, r in returns.items()], returns)
    deleted = prune_checkpoints(run, keep=2)
    assert names(run) == ["checkpoint_000003", "checkpoint_000005", "checkpoint_000006"]
    assert sorted(os.path.basename(p) for p in deleted) == [
        "checkpoint_000001",
        "checkpoint_000002",
        "checkpoint_000004",
    ]
    assert json.loads((tmp_path / BEST_FILE).read_text()) == {"checkpoint": "checkpoint_000003", "score": 180.0}
    prune_checkpoints(run, keep=0)  # 0 keeps everything that is there
    assert len(names(run)) == 3


def test_evaluation_scores_win_and_a_resumed_row_replaces_the_old_one(tmp_path):
    rows = [
        {"training_iteration": 1, "episode_return_mean": 300.0, "evaluation": {"episode_return_mean": 20.0}},
        {"training_iteration": 2, "episode_return_mean": 10.0, "evaluation": {"episode_return_mean": 200.0}},
        {"training_iteration": 3, "episode_return_mean": 500.0},  # before the resume
        {"training_iteration": 3, "episode_return_mean": 5.0},  # the resumed run's iteration 3
        {"training_iteration": 4, "episode_return_mean": 6.0},
    ]
    run = make_run(tmp_path, rows, [1, 2, 3, 4])
    assert scores_by_iteration(run) == {1: 20.0, 2: 200.0, 3: 5.0, 4: 6.0}
    prune_checkpoints(run, keep=1)
    assert names(run) == ["checkpoint_000002", "checkpoint_000004"]


def test_without_progress_the_newest_stay(tmp_path):
    run = make_run(tmp_path, [], [1, 2, 3])
    os.remove(tmp_path / "progress.jsonl")
    prune_checkpoints(run, keep=2)
    assert names(run) == ["checkpoint_000002", "checkpoint_000003"] and not (tmp_path / BEST_FILE).exists()


def test_a_best_file_or_a_tune_folder_names_its_best_checkpoint(tmp_path):
    os.makedirs(tmp_path / "run")
    run = make_run(tmp_path / "run", [{"training_iteration": 2, "episode_return_mean": 9.0}], [1, 2])
    prune_checkpoints(run)
    assert named_best(os.path.join(run, BEST_FILE)) == os.path.join(run, "checkpoint_000002")
    assert named_best(run) is None  # a run's folder holds checkpoints: its newest, as before
    experiment = tmp_path / "tune"
    trial = experiment / "PPO_0" / "checkpoint_000000" / "checkpoint_000004"
    os.makedirs(trial)
    (experiment / BEST_FILE).write_text(json.dumps({"checkpoint": str(trial), "score": 1.0}))
    assert named_best(str(experiment)) == named_best(str(experiment / BEST_FILE)) == str(trial)
    assert named_best(str(trial)) is None and named_best(str(tmp_path / "nothing")) is None
    (experiment / BEST_FILE).write_text("{oops")
    with pytest.raises(ConfigError, match=r"best_checkpoint.json: not a best_checkpoint.json that jaxflow wrote"):
        named_best(str(experiment))
    (experiment / BEST_FILE).write_text(json.dumps({"checkpoint": 3}))
    with pytest.raises(ConfigError, match=r"its 'checkpoint' must name a checkpoint, got 3"):
        named_best(str(experiment))
