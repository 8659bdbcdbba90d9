"""Ctrl-C and SIGTERM sent to a real ``jaxflow train`` process: the iteration in flight is
finished and saved, the command ends in one line with the shell's status for the signal, and
``--resume`` continues with every iteration logged once. A resume also removes what a killed
save left in the logdir (its ``.tmp-checkpoint_*`` folders), and nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jaxflow.api import checkpoint, cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 300
"""How long the run may take to log its first rows (a loaded 2-core machine starts Ray and compiles)."""
EXIT_TIMEOUT_S = 300
"""How long it may take to finish its iteration, save and stop once signalled (here 10-20 s;
a fresh-clone CI run at load average 20 on 2 cores passed 120 s once)."""
ROWS_BEFORE_SIGNAL = 2

RAY_RUN = ["--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "1"]
RAY_RUN += ["--set", "num_envs_per_worker=2", "--set", "rollout_fragment_length=32"]
RAY_RUN += ["--set", "train_batch_size=64", "--set", "minibatch_size=32"]
DEVICE_RUN = ["--algo", "PPO", "--env", "gymnax/CartPole-v1", "--set", "iterations_per_call=1"]
DEVICE_RUN += ["--set", "num_envs=4", "--set", "rollout_fragment_length=16", "--set", "minibatch_size=32"]


def _rows(logdir: str) -> list[int]:
    with open(os.path.join(logdir, "progress.jsonl"), encoding="utf-8") as f:
        return [json.loads(line)["training_iteration"] for line in f if line.strip()]


def _signalled_run(tmp_path, flags: list[str], signum: int, to_group: bool) -> tuple[int, str, str]:
    """Starts ``jaxflow train`` in a session of its own, sends ``signum`` once its progress.jsonl
    has :data:`ROWS_BEFORE_SIGNAL` rows (to its whole process group, as a terminal's Ctrl-C
    does, where ``to_group``), and returns its exit status, stderr and logdir."""
    logdir, out, err = str(tmp_path / "run"), tmp_path / "stdout", tmp_path / "stderr"
    argv = [sys.executable, "-m", "jaxflow.api.cli", "train", *flags, "--logdir", logdir, "--quiet"]
    argv += ["--stop", "training_iteration=1000000"]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        progress = os.path.join(logdir, "progress.jsonl")
        while not (os.path.exists(progress) and len(_rows(logdir)) >= ROWS_BEFORE_SIGNAL):
            assert proc.poll() is None, f"the run ended before it was signalled: {err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the run logged no rows in time"
            time.sleep(0.1)
        (os.killpg if to_group else os.kill)(proc.pid, signum)
        status = proc.wait(timeout=EXIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return status, err.read_text(), logdir


def _check_saved_on_signal(status: int, err: str, logdir: str, signum: int) -> tuple[int, str]:
    """The command ended with 128 + ``signum``, no traceback, and one line naming the checkpoint
    of its last logged iteration, which verifies; returns that iteration and checkpoint."""
    assert status == 128 + signum, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    name = signal.Signals(signum).name
    [line] = [line for line in err.splitlines() if line.startswith(f"jaxflow: interrupted by {name}")]
    path = line.split(": checkpoint ", 1)[1].split(" written at iteration ")[0]
    last = _rows(logdir)[-1]
    assert checkpoint.iteration_of(path) == last and f"written at iteration {last};" in line
    assert checkpoint.verify(path)["iteration"] == last
    assert f"--resume {logdir}" in line
    return last, path


def test_ctrl_c_in_ray_mode_saves_the_iteration_in_flight_and_a_resume_logs_each_iteration_once(
    ray_local, tmp_path, capsys
):
    status, err, logdir = _signalled_run(tmp_path, RAY_RUN, signal.SIGINT, to_group=True)
    last, saved = _check_saved_on_signal(status, err, logdir, signal.SIGINT)
    # The resume (in this process: the same command, with Ray and compilations warm) goes on from there.
    assert cli.main(["train", "--resume", logdir, "--stop", f"training_iteration={last + 2}", "--quiet"]) == 0
    assert _rows(logdir) == list(range(1, last + 3))
    assert f"jaxflow: resuming PPO from {saved}," in capsys.readouterr().out


STALE = ".tmp-checkpoint_000099-0a1b2c3d"
"""What a save killed before its rename leaves: removed by the next run in the logdir."""
LOOKALIKES = (".tmp-checkpoint_000099-notahexid", ".tmp-notes", "tmp-checkpoint_000099-0a1b2c3d")
"""Names close to a save's temporary folder that jaxflow never writes: kept."""


def test_sigterm_in_device_mode_saves_and_a_resume_removes_only_unfinished_saves(tmp_path, capsys):
    status, err, logdir = _signalled_run(tmp_path, DEVICE_RUN, signal.SIGTERM, to_group=False)
    last, _ = _check_saved_on_signal(status, err, logdir, signal.SIGTERM)
    os.makedirs(os.path.join(logdir, STALE, "state"))
    for name in LOOKALIKES:
        os.makedirs(os.path.join(logdir, name))
    assert cli.main(["train", "--resume", logdir, "--stop", f"training_iteration={last + 2}", "--quiet"]) == 0
    assert _rows(logdir) == list(range(1, last + 3))
    names = set(os.listdir(logdir))
    assert STALE not in names and set(LOOKALIKES) <= names
    assert f"jaxflow: removed 1 unfinished checkpoint save(s) in {logdir}: {STALE}" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _handlers_restored():
    """Each command run in this process puts the signal handlers back as it found them."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    assert {s: signal.getsignal(s) for s in before} == before
