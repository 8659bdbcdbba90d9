"""A run trained with ``--import MODULE`` remembers the module: evaluate, export, resume and
``Algorithm.restore`` import it again without ``--import`` (given again, it still works), and where
it cannot be imported they say so in one line (exit status 2), never that the checkpoint does not
verify: the checkpoint is intact."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_process import jaxflow_process

from jaxflow import Algorithm
from jaxflow.api.user_modules import IMPORTS_KEY, MissingNameError

MODULE = "user_modules_under_test"
ENV = "me/RememberedPole-v0"
MODEL = "remembered_tiny_mlp"
SOURCE = f'''
import gymnasium

from jaxflow import envs, register_model
from jaxflow.networks import MLPActorCritic


def make_pole(**kwargs):
    return gymnasium.make("CartPole-v1", **kwargs)


envs.register("{ENV}", make_pole)
register_model("{MODEL}", lambda num_outputs: MLPActorCritic(num_outputs, (8,)))
'''
TINY = ["--num-workers", "0", "--set", "rollout_fragment_length=32", "--set", "train_batch_size=64"]
TINY += ["--set", "minibatch_size=32", "--set", "num_envs_per_worker=2", "--set", f"model={MODEL}"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of one iteration on the module's env and model, trained with ``--import``; the
    folder holding the module (``mods``) is on no path but the ``PYTHONPATH`` :func:`_jaxflow` gives."""
    root = tmp_path_factory.mktemp("imports")
    (root / "mods").mkdir()
    (root / "mods" / f"{MODULE}.py").write_text(SOURCE)
    argv = ["train", "--import", MODULE, "--algo", "PPO", "--env", ENV, *TINY]
    done = _jaxflow(root, [*argv, "--stop", "training_iteration=1", "--logdir", str(root / "run"), "--quiet"])
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def _jaxflow(root, argv: list[str], module_on_path: bool = True) -> subprocess.CompletedProcess:
    """``jaxflow ARGV`` in a new process run in ``root`` (not the module's folder), with the
    module's folder on ``PYTHONPATH`` where ``module_on_path``."""
    return jaxflow_process(root, argv, str(root / "mods") if module_on_path else "")


def test_the_run_remembers_its_imports(trained):
    [checkpoint] = sorted((trained / "run").glob("checkpoint_*"))
    assert json.loads((checkpoint / "meta.json").read_text())[IMPORTS_KEY] == [MODULE]
    assert json.loads((trained / "run" / "config.json").read_text())[IMPORTS_KEY] == [MODULE]


def test_evaluate_export_and_resume_import_it_again(trained):
    evaluated = _jaxflow(trained, ["evaluate", "--checkpoint", str(trained / "run"), "--episodes", "2"])
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f"{ENV}: greedy return over 2 episodes" in evaluated.stdout
    # --import given again imports nothing twice (Python imports a module once per process).
    argv = ["export", "--import", MODULE, "--checkpoint", str(trained / "run"), "--out", str(trained / "exported")]
    exported = _jaxflow(trained, argv)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert json.loads((trained / "exported" / "policy.json").read_text())["env"] == ENV
    resumed = _jaxflow(trained, ["train", "--resume", str(trained / "run"), "--stop", "training_iteration=2"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "done: iteration 2" in resumed.stdout
    rows = (trained / "run" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(row)["training_iteration"] for row in rows] == [1, 2]
    assert json.loads((trained / "run" / "checkpoint_000002" / "meta.json").read_text())[IMPORTS_KEY] == [MODULE]


def test_a_module_that_cannot_be_imported_is_named_in_one_line(trained):
    done = _jaxflow(trained, ["evaluate", "--checkpoint", str(trained / "run")], module_on_path=False)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("jaxflow: error: checkpoint "), lines
    assert f"its env {ENV!r} is unknown here: its run imported {MODULE} (--import)" in lines[0]
    assert f"no module named {MODULE!r}" in lines[0] and "verif" not in lines[0]


def test_algorithm_restore_imports_it_again(trained, monkeypatch):
    """In this process: without the module on the path, the one-line error; with it, the run
    restores, its env and model registered by the module it remembered."""
    run = str(trained / "run")
    with pytest.raises(MissingNameError, match=f"its run imported {MODULE} \\(--import\\)"):
        Algorithm.restore(run)
    monkeypatch.syspath_prepend(str(trained / "mods"))
    algo = Algorithm.restore(run)
    try:
        assert algo.config.env == ENV and algo.config.model == MODEL and algo.iteration >= 1
        assert algo.compute_actions([[0.0, 0.0, 0.0, 0.0]]).shape == (1,)
    finally:
        algo.stop()
    assert MODULE in sys.modules
