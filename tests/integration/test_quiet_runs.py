"""Issue 44's noise, through real processes: a MuJoCo run with Ray workers and a Ray of its own
prints no warning of Ray's or MuJoCo's; W&B (offline) and MLflow (file store) runs say where they
write; ``evaluate --video`` prints no SDL error; and a Python process that started Ray through
jaxflow (a notebook's kernel) ends on SIGTERM without Ray's stack dump."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

NOISE = (
    "Token authentication is enabled",  # Ray, on every start of a local Ray
    "Missing packages",  # Ray's notebook check (ipywidgets)
    "XDG_RUNTIME_DIR",  # SDL, rendering evaluate --video's frames
    "settotalmass",  # MuJoCo, on every compile of HalfCheetah's model, in every worker
    "Traceback",
)
STACK_DUMP = ("SIGTERM received at time=", "logging.cc", "PC: @")
"""Lines of the stack dump Ray's core worker (absl's failure handler) prints on SIGTERM."""
TINY = ["--set", "train_batch_size=128", "--set", "minibatch_size=64", "--set", "num_epochs=1"]
MUJOCO_RUN = ["train", "--algo", "PPO", "--env", "HalfCheetah-v5", "--num-workers", "2", *TINY]
TRACKED_RUN = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "0", *TINY]
TRACKED_RUN += ["--logger", "jsonl,wandb,mlflow"]
STARTS_RAY = (
    "from jaxflow.api.ray_program import init_ray\ninit_ray()\nprint('up', flush=True)\nimport time\ntime.sleep(300)"
)
TRACKER_ENV = ("WANDB_API_KEY", "WANDB_MODE", "MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "NETRC")
TIMEOUT_S = 300
"""How long one of these processes may take on a loaded 2-core machine (here 10-60 s)."""


def _env(tmp_path, **extra: str) -> dict[str, str]:
    """The test's environment with a home of its own (no W&B settings) and no tracker variables but ``extra``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in TRACKER_ENV}
    return {**env, "HOME": str(home), "WANDB_DISABLE_GIT": "true", **extra}


def _cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "jaxflow.api.cli", *argv]


@pytest.fixture(scope="module")
def runs(ray_local, tmp_path_factory):
    """The processes, two at a time: the MuJoCo run (a Ray of its own: ``RAY_ADDRESS=local``) beside
    a script that joins the session's Ray and is sent SIGTERM once it is up; then the tracked
    CartPole run (no Ray) and its evaluation with ``--video``. Each one's status, stdout and stderr."""
    root = tmp_path_factory.mktemp("quiet")
    argv = _cli([*MUJOCO_RUN, "--stop", "training_iteration=1", "--logdir", str(root / "mujoco")])
    with open(root / "mujoco.out", "w") as out, open(root / "mujoco.err", "w") as err:
        mujoco = subprocess.Popen(argv, cwd=root, env=_env(root, RAY_ADDRESS="local"), stdout=out, stderr=err)
    with open(root / "script.out", "w") as out, open(root / "script.err", "w") as err:
        script = subprocess.Popen([sys.executable, "-c", STARTS_RAY], cwd=root, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (root / "script.out").read_text() != "up\n":
            assert script.poll() is None and time.monotonic() < deadline, (root / "script.err").read_text()
            time.sleep(0.1)
        time.sleep(1)  # Ray's connection settled: its handlers are all in place
        script.send_signal(signal.SIGTERM)
        script.wait(timeout=TIMEOUT_S)
        mujoco.wait(timeout=TIMEOUT_S)
    finally:
        for proc in (script, mujoco):
            if proc.poll() is None:
                proc.kill()
    env = _env(root, WANDB_MODE="offline")
    tracked = _run([*TRACKED_RUN, "--stop", "training_iteration=1", "--logdir", str(root / "tracked")], root, env)
    video = _run(
        ["evaluate", "--checkpoint", str(root / "tracked"), "--episodes", "1", "--video", str(root / "video")],
        root,
        env,
    )
    return {
        "root": root,
        "mujoco": (mujoco.returncode, (root / "mujoco.out").read_text(), (root / "mujoco.err").read_text()),
        "terminated": (script.returncode, "", (root / "script.err").read_text()),
        "tracked": tracked,
        "video": video,
    }


def _run(argv: list[str], cwd, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(_cli(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("name", ["mujoco", "tracked", "video"])
def test_a_run_prints_no_known_noise(runs, name):
    status, out, err = runs[name]
    assert status == 0, err[-3000:]
    assert [n for n in NOISE if n in out + err] == [], err[-3000:]
    assert not (runs["root"] / "MUJOCO_LOG.TXT").exists()  # MuJoCo's own log of the warning, in the working folder


def test_the_mujoco_run_trained_with_its_workers(runs):
    _, out, _ = runs["mujoco"]
    assert "(2 rollout workers)" in out and "done: iteration 1, env steps " in out


def test_a_python_process_that_started_ray_ends_on_sigterm_without_a_stack_dump(runs):
    status, _, err = runs["terminated"]
    assert status == signal.SIGTERM  # Ray's own Python handler ran: sys.exit(15)
    assert [line for line in err.splitlines() if any(d in line for d in STACK_DUMP)] == [], err[-3000:]


def test_trackers_say_where_they_write(runs):
    _, out, _ = runs["tracked"]
    root = runs["root"] / "tracked"
    [wandb] = [line for line in out.splitlines() if line.startswith("jaxflow: W&B run offline in ")]
    folder = wandb.removeprefix("jaxflow: W&B run offline in ").split(" ")[0]
    assert os.path.dirname(folder) == str(root / "wandb") and os.path.isdir(folder)
    assert f"`wandb sync {folder}` uploads it" in wandb
    [mlflow] = [line for line in out.splitlines() if line.startswith("jaxflow: MLflow run ")]
    assert mlflow.endswith(f"(experiment jaxflow) at {(root / 'mlruns').as_uri()}") and (root / "mlruns").is_dir()
    assert out.index("jaxflow: W&B run") < out.index("iter    1")  # said at the start, before the first iteration
