"""Issue 44's trackers, through the ``jaxflow`` command in a subprocess: a tracker that cannot
write (no package, no W&B credentials in online mode, an MLflow store that cannot be used) is
refused in one line before anything starts; progress.jsonl is written whatever ``--logger``
says; a run that fails before its first iteration leaves nothing behind (and removes nothing
it did not write); W&B and MLflow runs say where they write. W&B runs offline and MLflow
writes to file stores: no network is needed."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from jaxflow.api import cli

CHECK_TIMEOUT_S = 120
"""A refusal before anything starts: the interpreter, jaxflow's and the tracker's imports."""
RUN_TIMEOUT_S = 300
"""A run of two tiny iterations in the driver, or one refused once Ray is up."""
ITERATIONS = 2
PPO = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "0"]
TINY = ["--set", "train_batch_size=128", "--set", "minibatch_size=64", "--set", "num_epochs=1"]
TRACKER_ENV = ("WANDB_API_KEY", "WANDB_MODE", "MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "NETRC")
"""Variables of the trackers' that a test sets itself, never inherits."""


def jaxflow(argv, tmp_path, env=None, cwd=None, timeout=CHECK_TIMEOUT_S, python=None):
    """``jaxflow ARGV`` in a subprocess with a home of its own (no netrc, no W&B settings) and
    only ``env`` of the trackers' variables; ``python``: a script to run in its place."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in TRACKER_ENV}
    base.update(HOME=str(home), WANDB_DISABLE_GIT="true", **(env or {}))
    token = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")  # the session's Ray's, which it joins
    if os.path.exists(token):
        base.setdefault("RAY_AUTH_TOKEN_PATH", token)
    command = [sys.executable, "-c", python] if python else [sys.executable, "-m", "jaxflow.api.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=base, cwd=cwd, timeout=timeout)


def error_line(done) -> str:
    """The one ``jaxflow: error:`` line of a command refused with status 2, without a traceback."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("jaxflow: error: ")]
    return line


def closed_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def old_run(path):
    """A finished run's files, and a file of the user's, in ``path``; returns the listing."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"algorithm": "PPO", "config": {"lr": 1}}))
    (path / "progress.jsonl").write_text('{"training_iteration": 1}\n')
    (path / "notes.txt").write_text("mine")
    return sorted(os.listdir(path))


@pytest.mark.parametrize(
    "logger, env, said",
    [
        (
            "tensorboard,jsonl,wandb",
            {},
            "--logger wandb: WANDB_MODE is unset (online) but no W&B API key is configured (WANDB_API_KEY, or "
            "`wandb login`'s netrc entry); run `wandb login`, set WANDB_API_KEY, or set WANDB_MODE=offline",
        ),
        ("wandb", {"WANDB_MODE": "online"}, "--logger wandb: WANDB_MODE=online but no W&B API key is configured"),
        ("wandb", {"WANDB_API_KEY": "abc"}, "--logger wandb: W&B's credentials cannot be used (WANDB_API_KEY invalid"),
        ("mlflow", {"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port}"}, "no MLflow server answers at"),
        ("mlflow", {"MLFLOW_TRACKING_URI": "foo://bar"}, "MLFLOW_TRACKING_URI 'foo://bar' cannot be used ("),
        ("mlflow", {"MLFLOW_TRACKING_URI": "file:{tmp}/afile/mlruns"}, "cannot be written ('{tmp}/afile' is a file)"),
    ],
)
def test_a_tracker_that_cannot_write_is_refused_before_anything_starts(tmp_path, logger, env, said):
    (tmp_path / "afile").write_text("")
    run = tmp_path / "run"
    before = old_run(run)
    port = closed_port()
    env = {k: v.format(tmp=tmp_path, port=port) for k, v in env.items()}
    done = jaxflow([*PPO, "--logdir", str(run), "--overwrite", "--logger", logger], tmp_path, env)
    line = error_line(done)
    assert said.format(tmp=tmp_path) in line, line
    assert "jaxflow: PPO on" not in done.stdout  # refused before the run was even described
    assert sorted(os.listdir(run)) == before  # --overwrite has removed nothing
    assert not (tmp_path / "afile" / "mlruns").exists() and not (tmp_path / "home" / ".netrc").exists()


@pytest.mark.parametrize("module", ["wandb", "mlflow"])
def test_a_trackers_missing_package_is_named_with_its_extra(tmp_path, module):
    # The package made unimportable the way Python documents: None in sys.modules.
    script = (
        f"import sys; sys.modules[{module!r}] = None; from jaxflow.api.cli import main; "
        f"sys.exit(main(['train', '--algo', 'PPO', '--logger', {module!r}, '--logdir', {str(tmp_path / 'run')!r}]))"
    )
    line = error_line(jaxflow([], tmp_path, {"WANDB_MODE": "offline"}, python=script))
    assert line == f"jaxflow: error: --logger {module} needs the {module} package: pip install 'jaxflow-rl[{module}]'."
    assert not (tmp_path / "run").exists()


def test_too_many_workers_leave_no_logdir_behind(tmp_path):
    """The issue's command, refused for resources once Ray is up: no run directory is left
    (by default under ``runs/``); nothing is claimed before the run is built."""
    argv = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "100000"]
    done = jaxflow(argv, tmp_path, cwd=tmp_path, timeout=RUN_TIMEOUT_S)
    assert "rollout workers (num_workers=100000) need" in error_line(done)
    assert sorted(os.listdir(tmp_path)) == ["home"]  # no runs/ folder, nor the run's own


FILE_STORE_OFF = {"MLFLOW_ALLOW_FILE_STORE": "false"}
"""MLflow refuses its file store as the run starts: a tracker failing after its checks passed."""
STORE_REFUSED = "--logger mlflow: its run could not be started (The filesystem tracking backend"


def test_a_tracker_failing_as_its_run_starts_takes_back_what_the_run_wrote(tmp_path):
    done = jaxflow([*PPO, *TINY, "--logger", "tensorboard,mlflow"], tmp_path, FILE_STORE_OFF, cwd=tmp_path)
    assert error_line(done).startswith(f"jaxflow: error: {STORE_REFUSED}")
    assert "jaxflow: PPO on CartPole-v1" in done.stdout  # past the checks: the logdir was claimed, then written
    assert sorted(os.listdir(tmp_path)) == ["home"]  # its config.json, progress.jsonl, event file and runs/ removed


def files_of(path):
    """Every file under ``path`` with its bytes."""
    out = {}
    for folder, _, names in os.walk(path):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                out[os.path.relpath(os.path.join(folder, name), path)] = f.read()
    return out


def test_a_resumed_run_failing_before_its_first_iteration_keeps_every_file(tmp_path):
    run = str(tmp_path / "run")
    argv = [*PPO, *TINY, "--logdir", run, "--stop", "training_iteration=1", "--logger", "jsonl", "--quiet"]
    done = jaxflow(argv, tmp_path, timeout=RUN_TIMEOUT_S)  # a process of its own: it imported no other test's modules
    assert done.returncode == 0, done.stderr[-3000:]
    before = files_of(run)
    resume = ["train", "--resume", run, "--stop", f"training_iteration={ITERATIONS}", "--logger", "tensorboard,mlflow"]
    done = jaxflow(resume, tmp_path, FILE_STORE_OFF)
    assert error_line(done).startswith(f"jaxflow: error: {STORE_REFUSED}")
    assert files_of(run) == before  # every file as it was, and none added (no event file, no mlruns/)


def test_progress_jsonl_is_kept_whatever_the_loggers_and_trackers_say_where_they_write(tmp_path, capsys):
    offline = {"WANDB_MODE": "offline"}
    quiet, loud = tmp_path / "quiet", tmp_path / "loud"
    stop = ["--stop", f"training_iteration={ITERATIONS}"]
    done = jaxflow([*PPO, *TINY, *stop, "--logdir", str(quiet), "--logger", "wandb", "--quiet"], tmp_path, offline)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (quiet / "progress.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    assert "W&B run" not in done.stdout  # --quiet
    assert cli.main(["plot", str(quiet), "--out", str(tmp_path / "curve.png")]) == 0
    assert (tmp_path / "curve.png").stat().st_size > 0

    done = jaxflow([*PPO, *TINY, *stop, "--logdir", str(loud), "--logger", "wandb,mlflow"], tmp_path, offline)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    wandb_line = rf"jaxflow: W&B run offline in ({re.escape(str(loud / 'wandb'))}/offline-run-\S+) \(`wandb sync \1` uploads it\)"
    [found] = [m for m in map(re.compile(wandb_line).fullmatch, lines) if m]
    assert os.path.isdir(found.group(1))
    mlflow_line = (
        rf"jaxflow: MLflow run ([0-9a-f]{{32}}) \(experiment jaxflow\) at {re.escape((loud / 'mlruns').as_uri())}"
    )
    [found] = [m for m in map(re.compile(mlflow_line).fullmatch, lines) if m]
    [run_folder] = [f for f in (loud / "mlruns").glob(f"*/{found.group(1)}")]
    assert (run_folder / "meta.yaml").exists()
    assert len((loud / "progress.jsonl").read_text().splitlines()) == ITERATIONS
