"""A run's storage at a URI (``--storage``): the run's files mirrored there, checkpoints all
or nothing, a resume from the URI alone, and replay shards that never touch it.

``memory://`` is fsspec's in-memory filesystem: it exists in this (the driver's) process
only, so whatever arrives there was written by the driver, not by a Ray actor.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.logdir import run_files
from jaxflow.api.loop import train
from jaxflow.api.manifest import MANIFEST
from jaxflow.api.storage import Storage, StorageError
from jaxflow.replay.saved import RECORD_KEY

DQN_SMALL = dict(
    num_workers=0, num_replay_shards=2, learning_starts=64, rollout_fragment_length=16, min_env_steps_per_iteration=0
)


class BrokenUploads(MemoryFileSystem):
    """An in-memory store whose uploads fail after ``allowed`` files (a network cut mid-checkpoint)."""

    protocol = "brokenmem"
    allowed = 0

    def put_file(self, lpath, rpath, **kwargs):
        if BrokenUploads.allowed <= 0:
            raise ConnectionError("the network went away")
        BrokenUploads.allowed -= 1
        return super().put_file(lpath, rpath, **kwargs)


fsspec.register_implementation("brokenmem", BrokenUploads, clobber=True)


def remote_bytes(store: Storage, name: str) -> bytes:
    return store.fs.cat_file(store._path(name))


SMALL = ["--set", "num_envs=8", "--set", "minibatch_size=64", "--set", "iterations_per_call=1", "--quiet"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """Device-mode PPO trained by the CLI for 3 iterations into a local logdir, mirrored at
    memory://ppo-run-<id> (a checkpoint every iteration, the newest 2 and the best kept). The
    memory store lives as long as the process: pytest-xdist may set this fixture up twice in one
    worker (its module's tests split by others), so each setup has a store of its own."""
    logdir = str(tmp_path_factory.mktemp("ppo") / "run")
    uri = f"memory://ppo-run-{uuid.uuid4().hex[:8]}"
    argv = ["train", "--algo", "PPO", "--env", "gymnax/CartPole-v1", *SMALL, "--stop", "training_iteration=3"]
    keep = ["--checkpoint-every", "1", "--keep-checkpoints", "2"]
    assert cli.main([*argv, *keep, "--logdir", logdir, "--storage", uri]) == 0
    return logdir, Storage(uri)


def test_the_storage_holds_the_runs_files_as_written_locally(ppo_run):
    logdir, store = ppo_run
    local = run_files(logdir)
    assert store.list_run() == local
    assert [n for n in local if n.startswith("checkpoint_")] == ["checkpoint_000002", "checkpoint_000003"]
    assert remote_bytes(store, "progress.jsonl") == open(os.path.join(logdir, "progress.jsonl"), "rb").read()
    for name in ("checkpoint_000002", "checkpoint_000003"):
        with open(os.path.join(logdir, name, MANIFEST), "rb") as f:
            assert remote_bytes(store, f"{name}/{MANIFEST}") == f.read()


def test_a_run_resumes_from_its_storage_alone(ppo_run, tmp_path, monkeypatch, capsys):
    """Without the local logdir, ``--resume URI`` pulls the run (every file checked against its
    checkpoint's manifest as it loads) and goes on copying itself there: each iteration's row
    once, retention's removals mirrored."""
    _, store = ppo_run
    monkeypatch.setenv("JAXFLOW_STORAGE_CACHE", str(tmp_path / "cache"))
    argv = ["train", "--resume", store.uri, "--stop", "training_iteration=4", "--quiet"]
    assert cli.main([*argv, "--checkpoint-every", "1", "--keep-checkpoints", "1"]) == 0
    out = capsys.readouterr().out
    assert f"pulled {store.uri} into" in out and "resuming PPO from" in out and "checkpoint_000003" in out
    rows = [json.loads(line) for line in remote_bytes(store, "progress.jsonl").decode().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    (local,) = os.listdir(tmp_path / "cache")
    assert store.list_run() == run_files(str(tmp_path / "cache" / local))
    assert "checkpoint_000004" in store.list_run() and "checkpoint_000002" not in store.list_run()


def test_an_upload_cut_short_leaves_no_checkpoint_to_resume_from(ppo_run, tmp_path):
    """A checkpoint's files go first and its manifest last: a cut upload leaves a copy that
    does not verify, and a resume from the URI takes the checkpoint before it."""
    logdir, _ = ppo_run
    store = Storage("brokenmem://cut")
    BrokenUploads.allowed = 10**6
    store.push(logdir)
    newest = os.path.join(logdir, "checkpoint_000003")
    shutil.copytree(newest, os.path.join(tmp_path, "checkpoint_000004"))  # a fourth checkpoint...
    for name in run_files(logdir):
        if not os.path.exists(os.path.join(tmp_path, name)):
            src = os.path.join(logdir, name)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(tmp_path, name))
    BrokenUploads.allowed = 3  # ...whose upload is cut after three files
    with pytest.raises(ConnectionError):
        store.push(str(tmp_path))
    assert store.fs.exists(store._path("checkpoint_000004")) and not store.fs.exists(
        store._path(f"checkpoint_000004/{MANIFEST}")
    )
    plan_path = store.pull(str(tmp_path / "pulled"))
    from jaxflow.api.restore import plan_restore

    plan = plan_restore(plan_path)
    assert os.path.basename(plan.path) == "checkpoint_000003"
    assert [os.path.basename(c) for c, _ in plan.skipped] == ["checkpoint_000004"]


def test_replay_shards_hand_their_contents_to_the_driver(ray_local, tmp_path, monkeypatch):
    """DQN's replay shards (Ray actors, other processes) cannot see memory://; their contents
    reach it through the driver, and come back from it into new shards."""
    monkeypatch.setenv("JAXFLOW_STORAGE_CACHE", str(tmp_path / "cache"))
    algo = Algorithm.build("DQN", env="CartPole-v1", **DQN_SMALL)
    try:
        train(algo, {"training_iteration": 6}, str(tmp_path / "run"), verbose=False, storage="memory://dqn-run")
        sizes = [s["size"] for s in algo.program.replay.stats()]
    finally:
        algo.stop()
    store = Storage("memory://dqn-run")
    (ckpt,) = [n for n in store.list_run() if n.startswith("checkpoint_")]
    assert store.fs.exists(store._path(f"{ckpt}/replay_shard_1.npz")) and min(sizes) > 0
    saved = [r["size"] for r in json.loads(store.fs.cat(store._path(f"{ckpt}/meta.json")))[RECORD_KEY]]
    # A store still in flight as the shards exported (DQN samples asynchronously) may land after.
    assert all(0 < at_save <= at_stop for at_save, at_stop in zip(saved, sizes)), (saved, sizes)
    shutil.rmtree(tmp_path / "run")
    restored = Algorithm.restore("memory://dqn-run")
    try:
        assert [s["size"] for s in restored.program.replay.stats()] == saved
    finally:
        restored.stop()


def test_a_storage_that_holds_a_run_is_refused_before_anything_starts(ppo_run, tmp_path, capsys):
    _, store = ppo_run
    argv = ["train", "--algo", "PPO", "--env", "gymnax/CartPole-v1", "--storage", store.uri]
    assert cli.main(argv + ["--logdir", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"storage '{store.uri}' already holds a run" in err
    assert not os.path.exists(tmp_path / "new")


def test_a_uri_that_cannot_be_opened_is_one_line():
    with pytest.raises(StorageError, match=r"storage 'nosuch://x' cannot be opened: fsspec says ValueError"):
        Storage("nosuch://x")
