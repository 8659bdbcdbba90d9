"""Ray Tune over jaxflow trials on the session's local Ray (2 CPUs): ASHA cuts weak PPO trials
on CartPole and the best one's checkpoint restores; a trial whose process is killed continues
from its checkpoint in a new one, its rollout worker in the trial's placement group; bad
input fails in one line before Ray starts."""

from __future__ import annotations

import glob
import json
import os
import signal

import pytest
from ray import tune

import jaxflow
import jaxflow.api.ray_program
from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.algorithm import find_checkpoint
from jaxflow.tune import SearchDim

# Strong learning rates first: they set ASHA's bar at its cut (iteration 4) before the two
# that barely move the policy (CartPole's random return, ~22) get there. Seed 0, hand-checked:
# 0.003 returns 50.5 at iteration 4, 0.001 returns 27.8, both weak ones 22.0 or less.
ASHA_RUN = [
    "tune", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "0", "--seed", "0",
    "--search", "lr=grid_search(0.003,0.001,0.000001,0.0000001)",
    "--scheduler", "asha", "--scheduler-interval", "4", "--stop", "training_iteration=8", "--checkpoint-every", "4",
]  # fmt: skip
WEAK_LRS = (1e-6, 1e-7)


@pytest.mark.learning
def test_asha_cuts_weak_cartpole_trials_and_the_best_checkpoint_restores(ray_local, tmp_path, capsys):
    logdir = str(tmp_path / "asha")
    assert cli.main([*ASHA_RUN, "--logdir", logdir]) == 0
    out = capsys.readouterr().out
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
    algo = Algorithm.restore(logdir)
    try:
        assert (algo.iteration, algo.config.optimizer.lr, algo.config.env) == (8, best["config"]["lr"], "CartPole-v1")
    finally:
        algo.stop()


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
        (["--search", "lrr=loguniform(1e-4,1e-2)"], "has no field 'lrr'. Did you mean ['lr']"),
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
