"""A bug in the user's own env ends ``jaxflow train`` in one line naming the file and line of
the user's code that raised it, exit status 1, with the traceback (that file and line too) in the
run's error.log: on a Ray worker, whose traceback would otherwise stay in its process, as in the
driver's process; ``jaxflow evaluate`` of a checkpoint ends alike, in one line."""

from __future__ import annotations

import os

import pytest

from jaxflow.api import cli

MODULE = "buggy_envs_under_test"
FROM_THE_START = "JAXFLOW_TESTS_BUGGY_FROM_THE_START"
"""Set: the env raises at its 5th step (in evaluate, here), else at its ``at_step``."""
ENV = "me/BuggyPole-v0"
SOURCE = f'''
import os

import gymnasium

from jaxflow import envs


class Buggy(gymnasium.Wrapper):
    def __init__(self, at_step: int = 40):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.at_step, self.steps = at_step, 0

    def step(self, action):
        self.steps += 1
        if self.steps == (5 if os.environ.get("{FROM_THE_START}") else self.at_step):
            raise ValueError(f"my env bug at step {{self.steps}}")
        return self.env.step(action)


envs.register("{ENV}", Buggy)
'''
BUG_LINE = next(i for i, line in enumerate(SOURCE.splitlines(), 1) if "raise ValueError" in line)
TINY = ["--set", "rollout_fragment_length=32", "--set", "train_batch_size=64", "--set", "minibatch_size=32"]
TINY += ["--set", "num_envs_per_worker=1", "--stop", "training_iteration=5", "--quiet"]


@pytest.fixture(scope="module")
def buggy_module(tmp_path_factory):
    """The module's file, on this process's path (Ray workers get its code by value); one for
    the module's tests, as Python imports it once."""
    folder = tmp_path_factory.mktemp("mods")
    path = folder / f"{MODULE}.py"
    path.write_text(SOURCE)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        yield str(path)


@pytest.mark.parametrize("num_workers", [1, 0])
def test_a_bug_in_the_users_env_is_named_by_file_and_line(ray_local, tmp_path, capsys, buggy_module, num_workers):
    logdir = str(tmp_path / "run")
    argv = ["train", "--import", MODULE, "--algo", "PPO", "--env", ENV, "--num-workers", str(num_workers), *TINY]
    status = cli.main([*argv, "--logdir", logdir])
    err = capsys.readouterr().err
    assert status == 1, err[-3000:]
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("jaxflow: error:")]
    assert line.startswith(f"jaxflow: error: PPO on {ENV!r} stopped: ")
    assert "my env bug at step 40" in line
    assert f" at {buggy_module}:{BUG_LINE} in step (ValueError; the traceback is in {logdir}/error.log)" in line
    if num_workers:  # the worker's error names its actor
        assert "ParallelRollouts: actor 0 raised ValueError('my env bug at step 40')" in line
    with open(os.path.join(logdir, "error.log"), encoding="utf-8") as f:
        log = f.read()
    assert f'File "{buggy_module}", line {BUG_LINE}, in step' in log  # the worker's frames, in its traceback
    if num_workers:  # what the Python API raises: a WorkerError, a ValueError too, naming the file and line
        raised = "WorkerError[ValueError]: ParallelRollouts: actor 0 raised ValueError('my env bug at step 40') at "
        assert f"{raised}{buggy_module}:{BUG_LINE} in step\n" in log


def test_a_bug_in_the_users_env_ends_evaluate_in_one_line(ray_local, tmp_path, capsys, buggy_module, monkeypatch):
    logdir = str(tmp_path / "run")
    trained = ["train", "--import", MODULE, "--algo", "PPO", "--env", ENV, "--num-workers", "0", "--quiet"]
    trained += ["--set", 'env_config={"at_step": 1000000}']  # no bug while it trains
    assert cli.main([*trained, *TINY[:-3], "--stop", "training_iteration=1", "--logdir", logdir]) == 0
    monkeypatch.setenv(FROM_THE_START, "1")
    status = cli.main(["evaluate", "--checkpoint", logdir, "--episodes", "2"])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1] == (
        f"jaxflow: error: evaluate stopped: my env bug at step 5 at {buggy_module}:{BUG_LINE} in step "
        "(ValueError; --debug shows the traceback)"
    )
