"""``jaxflow tune`` in a subprocess on the session's Ray: a line for each trial as it ends (id,
searched value, return, iterations, jaxflow checkpoint) before the final table, and trials that
import the user's module (``--import``), from a folder on the command's ``PYTHONPATH`` only, and
remember it: ``jaxflow evaluate`` of the best trial needs no ``--import``."""

from __future__ import annotations

import json
import os
import re
import subprocess

from cli_process import jaxflow_process

from jaxflow.api import checkpoint
from jaxflow.api.user_modules import IMPORTS_KEY

MODULE = "tune_progress_module"
ENV = "me/TunedPole-v0"
SOURCE = f'''
import gymnasium

from jaxflow import envs


def make_pole(**kwargs):
    return gymnasium.make("CartPole-v1", **kwargs)


envs.register("{ENV}", make_pole)
'''
LRS = (0.001, 0.003)
TUNE = ["tune", "--import", MODULE, "--algo", "PPO", "--env", ENV, "--num-workers", "0", "--seed", "0"]
TUNE += ["--search", f"lr=grid_search({LRS[0]},{LRS[1]})", "--stop", "training_iteration=1"]
TUNE += ["--set", "train_batch_size=128", "--set", "minibatch_size=64", "--set", "num_epochs=1"]
TRIAL_LINE = re.compile(
    r"^jaxflow: trial (\S+) done: lr=(\S+), return (\S+), (\d+) iterations, checkpoint (\S+)$", re.MULTILINE
)


def _jaxflow(root, argv: list[str]) -> subprocess.CompletedProcess:
    """``jaxflow ARGV`` in a new process run in ``root``, with the module's folder (``root/mods``)
    on its ``PYTHONPATH`` and nowhere else: the session's Ray, whose trial processes do not get
    that ``PYTHONPATH``, is joined through ``RAY_ADDRESS``."""
    return jaxflow_process(root, argv, str(root / "mods"))


def test_each_trial_is_said_as_it_ends_and_remembers_the_users_module(ray_local, tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{MODULE}.py").write_text(SOURCE)
    logdir = tmp_path / "tune"
    done = _jaxflow(tmp_path, [*TUNE, "--logdir", str(logdir)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    lines = {m[0]: m[1:] for m in TRIAL_LINE.findall(done.stdout)}  # trial -> lr, return, iterations, checkpoint
    assert sorted(float(lr) for lr, *_ in lines.values()) == list(LRS), done.stdout
    table = done.stdout.index("\ntrial ")
    assert all(done.stdout.index(f"jaxflow: trial {trial} done") < table for trial in lines)
    rows = {
        r.split()[0]: r.split() for r in done.stdout[table:].splitlines()[2:4]
    }  # trial, lr, last, best, its, status
    for trial, (lr, score, iterations, path) in lines.items():
        assert rows[trial][1:4] == [lr, score, score] and rows[trial][4:] == [iterations, "done"] == ["1", "done"]
        assert checkpoint.verify(path)["iteration"] == 1 and path.startswith(str(logdir))
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
            assert json.load(f)[IMPORTS_KEY] == [MODULE]  # imported in the trial's process, remembered

    best = json.loads((logdir / "best_checkpoint.json").read_text())
    assert best["checkpoint"] == lines[best["trial"]][3]
    evaluated = _jaxflow(tmp_path, ["evaluate", "--checkpoint", str(logdir), "--episodes", "2"])  # no --import
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f"{ENV}: greedy return over 2 episodes" in evaluated.stdout
