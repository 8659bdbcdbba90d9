"""Ray Tune over jaxflow trials on the session's local Ray (2 CPUs): ASHA cuts weak PPO trials
on CartPole and the best one's checkpoint restores; ``jaxflow tune`` says each trial as it ends,
and its trials import the user's module (``--import``) from a folder on the command's
``PYTHONPATH`` only and remember it; a trial whose process is killed continues from its
checkpoint in a new one, its rollout worker in the trial's placement group; bad input fails in
one line before Ray starts."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from cli_process import CLI_TIMEOUT_S, jaxflow_process
from ray import tune

import jaxflow
import jaxflow.api.ray_program
from jaxflow.api import checkpoint, cli
from jaxflow.api.algorithm import find_checkpoint
from jaxflow.api.user_modules import IMPORTS_KEY
from jaxflow.tune import SearchDim

MODULE = "tune_progress_module"
ENV = "me/TunedPole-v0"
SOURCE = f'''
import gymnasium

from jaxflow import envs


def make_pole(**kwargs):
    return gymnasium.make("CartPole-v1", **kwargs)


envs.register("{ENV}", make_pole)
'''
"""The user's module: gymnasium's CartPole-v1 (the very env ``CartPole-v1`` names) under a name of its own."""
# Strong learning rates first: they set ASHA's bar at its cut (iteration 4) before the two
# that barely move the policy (CartPole's random return, ~22) get there. Seed 0, hand-checked:
# 0.003 returns 50.5 at iteration 4, 0.001 returns 27.8, both weak ones 22.0 or less.
ASHA_RUN = [
    "tune", "--import", MODULE, "--algo", "PPO", "--env", ENV, "--num-workers", "0", "--seed", "0",
    "--search", "lr=grid_search(0.003,0.001,0.000001,0.0000001)",
    "--scheduler", "asha", "--scheduler-interval", "4", "--stop", "training_iteration=8", "--checkpoint-every", "4",
]  # fmt: skip
WEAK_LRS = (1e-6, 1e-7)
TRIAL_LINE = re.compile(
    r"^jaxflow: trial (\S+) (done|cut): lr=(\S+), return (\S+), (\d+) iterations, checkpoint (\S+)$", re.MULTILINE
)
RESTORED = r"""
import json, sys
from jaxflow import Algorithm
from jaxflow.api import cli
assert cli.main(["evaluate", "--checkpoint", sys.argv[1], "--episodes", "2"]) == 0
algo = Algorithm.restore(sys.argv[1])
try:
    print(json.dumps([algo.iteration, algo.config.optimizer.lr, algo.config.env]))
finally:
    algo.stop()
"""
"""A new process, without ``--import``: ``jaxflow evaluate`` of an experiment's folder, then
``Algorithm.restore`` of it; its last line the restored run's iteration, lr and env."""


@dataclasses.dataclass
class AshaRun:
    """The ASHA experiment of :func:`asha_run`: its folder, ``jaxflow tune``'s process and the
    :data:`RESTORED` process after it."""

    logdir: str
    tuned: subprocess.CompletedProcess
    restored: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def asha_run(ray_local, tmp_path_factory) -> Iterator[AshaRun]:
    """``jaxflow tune`` of :data:`ASHA_RUN` in a new process on the session's Ray, importing the
    user's module from ``root/mods``, the only folder on its ``PYTHONPATH`` (the trials'
    processes, started by the session's Ray, do not get that ``PYTHONPATH``), then
    :data:`RESTORED` with the same ``PYTHONPATH``. One run for
    test_asha_cuts_weak_cartpole_trials_and_the_best_checkpoint_restores and
    test_each_trial_is_said_as_it_ends_and_remembers_the_users_module (each once ran its own)."""
    root = tmp_path_factory.mktemp("asha")
    (root / "mods").mkdir()
    (root / "mods" / f"{MODULE}.py").write_text(SOURCE)
    logdir = str(root / "asha")
    tuned = jaxflow_process(root, [*ASHA_RUN, "--logdir", logdir], str(root / "mods"))
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(root / "mods")}
    restored = subprocess.run(
        [sys.executable, "-c", RESTORED, logdir],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert restored.returncode == 0, restored.stderr[-3000:]
    yield AshaRun(logdir, tuned, restored)


@pytest.mark.learning
def test_asha_cuts_weak_cartpole_trials_and_the_best_checkpoint_restores(asha_run):
    logdir, out = asha_run.logdir, asha_run.tuned.stdout
    table = out[out.index("\ntrial ") + 1 :].splitlines()  # after the line each trial printed as it ended
    rows = {float(r.split()[1]): r.split() for r in table[1:5]}  # lr -> trial, lr, last, best, iterations, status
    assert sorted(rows) == [1e-7, 1e-6, 0.001, 0.003]
    for lr in WEAK_LRS:  # below the bar at the first cut: stopped there, 4 of 8 iterations
        assert rows[lr][4:] == ["4", "cut"], table
    assert any(row[4:] == ["8", "done"] for row in rows.values()), table

    events = sorted(glob.glob(os.path.join(logdir, "*", "events.out.tfevents.*")))
    assert len(events) == 4  # TensorBoard: each trial's hyperparameters and return
    for path in events:
        with open(path, "rb") as f:
            data = f.read()
        assert b"hparams" in data and b"lr" in data and b"episode_return_mean" in data

    with open(os.path.join(logdir, "best_checkpoint.json"), encoding="utf-8") as f:
        best = json.load(f)
    row = rows[best["config"]["lr"]]
    assert best["config"]["lr"] in (0.003, 0.001) and row[0] == best["trial"] and row[4:] == ["8", "done"]
    assert row[2] == f"{best['score']:.1f}" == f"{max(float(r[2]) for r in rows.values()):.1f}"
    assert f"checkpoint {best['checkpoint']}" in out
    # the experiment's folder and its best_checkpoint.json name that checkpoint, as the docs say
    assert find_checkpoint(os.path.join(logdir, "best_checkpoint.json"))[0] == best["checkpoint"]
    restored = json.loads(asha_run.restored.stdout.strip().splitlines()[-1])  # Algorithm.restore(logdir)'s run
    assert restored == [8, best["config"]["lr"], ENV]


# Next to the test above in the order (conftest's runs_first): one pytest-xdist process then
# makes asha_run for both, where split they would each make it.
@pytest.mark.shares_learning_run
def test_each_trial_is_said_as_it_ends_and_remembers_the_users_module(asha_run):
    """A line for each trial as it ends (id, status, searched value, return, iterations, jaxflow
    checkpoint) before the final table; each trial imported the user's module and its
    checkpoints remember it, so ``jaxflow evaluate`` of the best trial needs no ``--import``."""
    logdir, out = asha_run.logdir, asha_run.tuned.stdout
    lines = {m[0]: m[1:] for m in TRIAL_LINE.findall(out)}  # trial -> status, lr, return, iterations, checkpoint
    assert sorted(float(lr) for _, lr, *_ in lines.values()) == [1e-7, 1e-6, 0.001, 0.003], out
    table = out.index("\ntrial ")
    assert all(out.index(f"jaxflow: trial {trial} ") < table for trial in lines)
    rows = {r.split()[0]: r.split() for r in out[table:].splitlines()[2:6]}  # trial, lr, last, best, its, status
    for trial, (status, lr, score, iterations, path) in lines.items():
        assert rows[trial][1:3] == [lr, score] and rows[trial][4:] == [iterations, status]
        assert float(rows[trial][3]) >= float(score)  # the best return of the trial's results, the last one's at least
        assert (iterations, status) in (("4", "cut"), ("8", "done"))  # ASHA's cut, or the stop
        assert checkpoint.verify(path)["iteration"] == int(iterations) and path.startswith(logdir)
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
            assert json.load(f)[IMPORTS_KEY] == [MODULE]  # imported in the trial's process, remembered

    with open(os.path.join(logdir, "best_checkpoint.json"), encoding="utf-8") as f:
        best = json.load(f)
    assert best["checkpoint"] == lines[best["trial"]][4]
    assert f"{ENV}: greedy return over 2 episodes" in asha_run.restored.stdout  # evaluated with no --import


class KillOnce(tune.Callback):
    """Kills the trial's process (SIGKILL) at iteration ``at``, once; records each result's
    ``(pid, training_iteration, env_steps_sampled)``."""

    def __init__(self, at: int):
        self.at, self.killed, self.seen = at, False, []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.append((result["pid"], result["training_iteration"], result["env_steps_sampled"]))
        if result["training_iteration"] == self.at and not self.killed:
            self.killed = True
            os.kill(result["pid"], signal.SIGKILL)


def test_a_killed_trial_continues_from_its_checkpoint_with_its_worker_in_the_trials_group(ray_local, tmp_path):
    # One driver and one rollout worker take both CPUs in the trial's placement group: the
    # worker can start only inside that group (outside it, no CPU is free).
    kill = KillOnce(at=2)
    results = jaxflow.tune.tuner(
        "PPO",
        {"env": "CartPole-v1", "num_workers": 1, "seed": 0},
        [SearchDim("lr", "choice", (0.001,))],
        num_samples=1,
        scheduler=None,
        stop={"training_iteration": 4},
        logdir=str(tmp_path / "killed"),
        checkpoint_every=1,
        max_failures=1,
        callbacks=[kill],
    ).fit()
    assert results.errors == []
    pids = list(dict.fromkeys(pid for pid, _, _ in kill.seen))
    assert len(pids) == 2, kill.seen  # the trial ran on in a new process
    before = [(it, steps) for pid, it, steps in kill.seen if pid == pids[0]]
    after = [(it, steps) for pid, it, steps in kill.seen if pid == pids[1]]
    assert [it for it, _ in before] == [1, 2]
    # From the checkpoint of iteration 1 or 2 (the one being written at the kill may be lost),
    # not from 0: the counters go on where that checkpoint left them.
    assert after[0][0] in (2, 3) and [it for it, _ in after] == list(range(after[0][0], 5)), kill.seen
    assert after[0][1] == dict(before)[after[0][0] - 1] + before[0][1]
    assert results[0].metrics["num_healthy_workers"] == 1


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the input was validated")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)


@pytest.mark.parametrize(
    "words, message",
    [
        (["--search", "lr=loguniform(1e-4"], "--search 'lr=loguniform(1e-4' does not parse; write FIELD=loguniform"),
        (["--search", "lrr=loguniform(1e-4,1e-2)"], "has no field 'lrr'. Did you mean 'lr'?"),
        (["--set", "clip=0.1"], "has no field 'clip'"),
        (["--scheduler", "hyperband"], "--scheduler 'hyperband' is not one of ['fifo', 'asha', 'pbt']"),
        (["--scheduler", "asha", "--stop", "time_s=60"], "asha needs --stop training_iteration=N"),
        (["--scheduler", "pbt"], "--scheduler pbt perturbs sampled fields: give --search with choice"),
        (["--scheduler", "pbt", "--search", "lr=grid_search(0.1,0.01)"], "(not grid_search: ['lr'])"),
        (["--env", "CartPol-v1"], "Did you mean one of ['CartPole-v1'"),
        (["--num-samples", "0"], "argument --num-samples: must be an integer >= 1, got '0'"),
    ],
)
def test_bad_tune_input_is_one_line_and_exit_status_2(no_ray, capsys, words, message):
    assert cli.main(["tune", "--algo", "PPO", "--env", "CartPole-v1", *words]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxflow: error: ") and message in err, err


def test_a_trial_bigger_than_the_cluster_is_refused_before_any_starts(ray_local, tmp_path, capsys):
    argv = ["tune", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "2", "--logdir", str(tmp_path / "t")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "each trial needs {'CPU': 3.0}" in err and "the Ray cluster has {'CPU': 2.0} in all" in err, err
    assert not os.path.exists(tmp_path / "t")
