"""What a run that fails before its first iteration takes back from its logdir: only the run
files it wrote, then the folders it created where nothing else is left in them."""

from __future__ import annotations

import os

from jaxflow.api.logdir import NewRunFiles, missing_from

WRITTEN = ["config.json", "events.out.tfevents.1.host", "mlruns", "progress.jsonl", "wandb"]
"""What a run's writers put in its logdir before the first iteration, sorted."""


def write_run_files(logdir):
    for name in WRITTEN:
        if name in ("mlruns", "wandb"):
            os.makedirs(os.path.join(logdir, name, "inner"))
        else:
            with open(os.path.join(logdir, name), "w") as f:
                f.write("x")


def test_a_logdir_the_run_created_goes_with_its_parents(tmp_path):
    logdir = str(tmp_path / "runs" / "group" / "ppo")
    created = missing_from(logdir)
    assert created == str(tmp_path / "runs") and missing_from(str(tmp_path)) is None
    os.makedirs(logdir)
    written = NewRunFiles(logdir, created)
    write_run_files(logdir)
    assert written.remove() == WRITTEN
    assert os.listdir(tmp_path) == []


def test_what_was_there_and_files_of_other_names_stay(tmp_path):
    logdir = tmp_path / "run"
    (logdir / "checkpoint_000003").mkdir(parents=True)
    for name in ("config.json", "progress.jsonl", "notes.txt"):
        (logdir / name).write_text("old")
    written = NewRunFiles(str(logdir), None)
    write_run_files(str(logdir))  # config.json and progress.jsonl rewritten: they were there, so they stay
    (logdir / "other.txt").write_text("someone else's")
    assert written.remove() == ["events.out.tfevents.1.host", "mlruns", "wandb"]
    assert sorted(os.listdir(logdir)) == [
        "checkpoint_000003",
        "config.json",
        "notes.txt",
        "other.txt",
        "progress.jsonl",
    ]


def test_a_created_logdir_holding_another_file_is_kept(tmp_path):
    logdir = tmp_path / "new"
    created = missing_from(str(logdir))
    logdir.mkdir()
    written = NewRunFiles(str(logdir), created)
    write_run_files(str(logdir))
    (logdir / "notes.txt").write_text("written meanwhile, not by the run")
    assert written.remove() == WRITTEN
    assert os.listdir(logdir) == ["notes.txt"]
