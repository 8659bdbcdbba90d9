"""A run a divergence guard stops (a NaN from an env, or from an update) ends ``jaxflow train``
in one line naming the env, the step and the setting that lets such values through, exit
status 1, with the full traceback in the run's error.log; in Ray mode as in device mode."""

from __future__ import annotations

import os

import pytest

from jaxflow.api import cli

RAY_NAN = ["--algo", "PPO", "--env", "test/NaNAfter-v0", "--set", 'env_config={"at_step": 100}']
RAY_NAN += ["--num-workers", "1", "--set", "num_envs_per_worker=2", "--set", "rollout_fragment_length=32"]
RAY_NAN += ["--set", "train_batch_size=64", "--set", "minibatch_size=32"]
# Device mode, 4 envs turning NaN at each episode's 5th step, 2 iterations of 4 steps per call:
# the first NaN at the second iteration's first step, env step 16 (as in test_divergence_guards).
DEVICE_NAN = ["--algo", "PPO", "--env", "test/NaNAfterJax-v0", "--set", 'env_config={"at_step": 5}']
DEVICE_NAN += ["--set", "num_envs=4", "--set", "rollout_fragment_length=4", "--set", "minibatch_size=16"]
DEVICE_NAN += ["--set", "iterations_per_call=2"]


def _failed_run(tmp_path, capsys, flags: list[str]) -> tuple[str, str]:
    """Runs ``jaxflow train`` on ``flags`` until it fails; checks the exit status, the one line
    and the traceback in error.log; returns the line and the log."""
    logdir = str(tmp_path / "run")
    status = cli.main(["train", *flags, "--logdir", logdir, "--stop", "training_iteration=50", "--quiet"])
    err = capsys.readouterr().err
    assert status == 1, err[-3000:]
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("jaxflow: error:")]
    log = os.path.join(logdir, "error.log")
    assert line.endswith(f"; the traceback is in {log})")
    with open(log, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("=== ") and "Traceback (most recent call last)" in text
    return line, text


def test_a_nan_from_a_ray_workers_env_ends_the_command_in_one_line(ray_local, tmp_path, capsys):
    line, log = _failed_run(tmp_path, capsys, RAY_NAN)
    assert line.startswith(
        "jaxflow: error: PPO on 'test/NaNAfter-v0' stopped: rollout worker 0: env 'test/NaNAfter-v0' returned a "
        "NaN or infinite observation at the worker's env step "
    )
    assert "check_finite=false lets such values through. (EnvValueError;" in line
    assert "WorkerError[EnvValueError]" in log  # the worker's error, as the driver met it


@pytest.mark.parametrize(
    "check_finite, guard, said",
    [
        (True, "EnvValueError", "returned a NaN or infinite observation at env step 16"),
        (False, "NonFiniteUpdateError", "on_nonfinite='skip' skips such steps and goes on"),
    ],
)
def test_a_nan_in_device_mode_ends_the_command_in_one_line(tmp_path, capsys, check_finite, guard, said):
    flags = [*DEVICE_NAN, "--set", f"check_finite={str(check_finite).lower()}"]
    line, log = _failed_run(tmp_path, capsys, flags)
    assert line.startswith("jaxflow: error: PPO on 'test/NaNAfterJax-v0' stopped: ")
    assert said in line and f"({guard};" in line
    assert f"{guard}:" in log
