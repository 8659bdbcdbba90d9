"""Replacing a checkpoint is atomic at every step: a write interrupted before the old copy
is renamed aside, between the renames, or before the old copy is deleted leaves a checkpoint
that verifies and restores; what is not a checkpoint is never replaced."""

from __future__ import annotations

import os
import shutil

import jax
import numpy as np
import pytest

from jaxflow.api import checkpoint, checkpoint_state
from jaxflow.api.registry import get_algorithm
from jaxflow.api.restore import plan_restore, state_template
from jaxflow.config.names import make_config
from jaxflow.config.parsing import to_json_dict

ITERATION = 4


class Crash(Exception):
    """A process killed at this point of a write."""


@pytest.fixture(scope="module")
def dqn():
    spec = get_algorithm("DQN")
    config = make_config(spec.config_cls, env="CartPole-v1", hidden_sizes=(16,))
    state = jax.device_get(state_template(config, spec).state)
    return state, {"algorithm": "DQN", "config": to_json_dict(config), "context": {"counters": {}}}


def _crash_at(monkeypatch, name: str, k: int, directory: str) -> None:
    """Makes the ``k``-th ``os.rename`` or ``shutil.rmtree`` of a directory directly under
    ``directory`` (not of orbax's files inside one) raise :class:`Crash`."""
    real = {"rename": os.rename, "rmtree": shutil.rmtree}[name]
    calls = []

    def crashing(path, *args, **kwargs):
        # The temporary directory is renamed into place, but never deleted on the way.
        ours = os.path.dirname(os.path.abspath(path)) == directory
        if ours and (name == "rename" or not os.path.basename(path).startswith(".tmp-")):
            calls.append(path)
            if len(calls) == k:
                raise Crash(f"killed at {name} #{k}")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os if name == "rename" else shutil, name, crashing)


@pytest.mark.parametrize(
    "crash, k, survivor, left",
    [
        ("rename", 1, "old", ["checkpoint_000004"]),  # before the old one is renamed aside
        ("rename", 2, "old", [".old-checkpoint_000004"]),  # between the renames: only the aside copy
        ("rmtree", 1, "new", ["checkpoint_000004", ".old-checkpoint_000004"]),  # before the old one is deleted
    ],
)
def test_an_interrupted_replace_leaves_a_loadable_checkpoint(dqn, tmp_path, monkeypatch, crash, k, survivor, left):
    state, meta = dqn
    directory = str(tmp_path)
    checkpoint.save(directory, ITERATION, state, meta)
    new = state._replace(step=np.asarray(state.step) + 5)
    with monkeypatch.context() as m:
        _crash_at(m, crash, k, directory)
        with pytest.raises(Crash):
            checkpoint.save(directory, ITERATION, new, meta)
    # A process killed mid-write leaves its temporary directory behind; it is ignored.
    os.makedirs(tmp_path / ".tmp-checkpoint_000009-deadbeef" / "state")
    names = sorted(n for n in os.listdir(directory) if not n.startswith(".tmp-"))
    assert [n.rsplit("-", 1)[0] if n.startswith(".old-") else n for n in names] == sorted(left)
    plan = plan_restore(directory)
    assert plan.skipped == [] and os.path.basename(plan.path).rsplit("-", 1)[0] in left
    restored = checkpoint_state.restore_state(plan.path, plan.template.state)
    assert int(restored.step) == int(state.step) + (5 if survivor == "new" else 0)
    # The run goes on: the next checkpoint is written and found; rewriting this one leaves no aside copy.
    checkpoint.save(directory, ITERATION + 1, new, meta)
    assert checkpoint.latest(directory) == os.path.join(directory, "checkpoint_000005")
    checkpoint.save(directory, ITERATION, new, meta)
    assert sorted(n for n in os.listdir(directory) if not n.startswith(".tmp-")) == [
        "checkpoint_000004",
        "checkpoint_000005",
    ]


def test_a_complete_replace_leaves_only_the_new_checkpoint(dqn, tmp_path):
    state, meta = dqn
    checkpoint.save(str(tmp_path), ITERATION, state, meta)
    path = checkpoint.save(str(tmp_path), ITERATION, state._replace(step=np.asarray(7, np.int32)), meta)
    assert os.listdir(tmp_path) == ["checkpoint_000004"]
    assert int(checkpoint_state.restore_state(path, state).step) == 7


def test_only_the_unfinished_saves_jaxflow_names_are_removed(dqn, tmp_path):
    """A save killed before its rename leaves ``.tmp-checkpoint_<N>-<8 hex>``: the next run in the
    logdir removes such folders, and nothing else, however close its name."""
    state, meta = dqn
    done = checkpoint.save(str(tmp_path), ITERATION, state, meta)
    unfinished = f".tmp-checkpoint_{ITERATION + 1:06d}-0a1b2c3d"
    shutil.copytree(done, tmp_path / unfinished)  # as far as a save gets before its rename
    kept = [".tmp-checkpoint_000005-0a1b2c3", ".tmp-checkpoint_000005-0A1B2C3D", ".tmp-checkpoint_x-0a1b2c3d", ".tmp-n"]
    for name in kept:
        (tmp_path / name).mkdir()
    (tmp_path / ".tmp-checkpoint_000006-0a1b2c3d").write_text("a file, not a save's folder")
    os.symlink(done, tmp_path / ".tmp-checkpoint_000007-0a1b2c3d")  # a link, not a save's folder
    before = set(os.listdir(tmp_path))
    assert checkpoint.remove_unfinished(str(tmp_path)) == [unfinished]
    assert set(os.listdir(tmp_path)) == before - {unfinished} and os.path.isdir(done)
    assert checkpoint.remove_unfinished(str(tmp_path / "absent")) == []


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_save_refuses_a_same_named_folder_or_file_jaxflow_did_not_write(dqn, tmp_path, kind):
    state, meta = dqn
    taken = tmp_path / f"checkpoint_{ITERATION:06d}"
    if kind == "folder":
        taken.mkdir()
        (taken / "notes.txt").write_text("mine")
    else:
        taken.write_text("mine")
    with pytest.raises(
        checkpoint.CheckpointError, match=r"exists and is not a jaxflow checkpoint \(it has no meta.json\)"
    ):
        checkpoint.save(str(tmp_path), ITERATION, state, meta)
    assert sorted(os.listdir(tmp_path)) == [taken.name]  # nothing written, nothing removed
    assert (taken / "notes.txt" if kind == "folder" else taken).read_text() == "mine"
