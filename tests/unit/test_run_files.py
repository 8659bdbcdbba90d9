"""``jaxflow train --config FILE``: a run's flags from a JSON file, and the tuned examples in
``examples/tuned/`` (each one builds, and each one that states a result is run by a test)."""

from __future__ import annotations

import glob
import json
import os

import pytest
import tuned_examples as tuned

from jaxflow.api.cli_args import new_run, overrides, parse, train_parser
from jaxflow.api.loop import parse_stop
from jaxflow.api.run_file import run_file_arguments
from jaxflow.api.spaces import env_spaces


@pytest.mark.parametrize("name", tuned.names())
def test_each_tuned_example_builds_a_valid_run(name):
    with open(tuned.path(name), encoding="utf-8") as f:
        data = json.load(f)
    assert len(data.get("description", "")) > 40  # says what it reaches, where and how it was measured
    args = parse(["train", "--config", tuned.path(name)])
    spec, config = new_run(args)
    assert spec.name == data["algo"] and config.env == data["env"] and config.seed == data["seed"]
    env_spaces(config, spec)  # the env exists and the algorithm can act in it
    stop = parse_stop(args.stop)
    assert {k: float(v) for k, v in data["stop"].items()} == stop
    assert set(tuned.reaches(name)) <= {"episode_return_mean", "evaluation/episode_return_mean"}


LEARNING_SOURCES = ("learning/*.py", "integration/test_multinode.py")
"""The learning tests' files: tests/learning, and the multi-node cluster's runs of PPO's and Ape-X's examples."""


def test_every_stated_result_is_checked_by_a_learning_test():
    """A file that states what it reaches is run to it by a learning test (named in its source)."""
    tests = os.path.join(os.path.dirname(os.path.dirname(tuned.TUNED)), "tests")
    sources = "".join(
        open(p, encoding="utf-8").read()
        for pattern in LEARNING_SOURCES
        for p in glob.glob(os.path.join(tests, pattern))
    )
    stated = [name for name in tuned.names() if tuned.reaches(name)]
    assert len(stated) >= 10
    assert [name for name in stated if f'"{name}"' not in sources] == []


def test_flags_given_override_the_files(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "description": "x",
                "algo": "DQN",
                "env": "CartPole-v1",
                "seed": 1,
                "quiet": True,
                "overwrite": False,
                "set": {"lr": 0.0005, "hidden_sizes": [64, 64], "env_config": {"sutton_barto_reward": True}},
                "stop": {"episode_return_mean": 450, "env_steps_sampled": 100000},
            }
        )
    )
    assert run_file_arguments(str(run), train_parser()) == [
        ("--algo", "DQN"),
        ("--env", "CartPole-v1"),
        ("--seed", "1"),
        ("--quiet",),
        ("--set", "lr=0.0005"),
        ("--set", "hidden_sizes=64,64"),
        ("--set", 'env_config={"sutton_barto_reward": true}'),
        ("--stop", "episode_return_mean=450"),
        ("--stop", "env_steps_sampled=100000"),
    ]
    args = parse(["train", "--config", str(run), "--seed", "7", "--set", "lr=1e-4", "--stop", "env_steps_sampled=5000"])
    assert args.seed == 7 and args.quiet and not args.overwrite
    assert parse_stop(args.stop) == {"episode_return_mean": 450.0, "env_steps_sampled": 5000.0}
    _, config = new_run(args)
    assert overrides(args)["lr"] == "1e-4" and config.optimizer.lr == 1e-4
    assert config.hidden_sizes == (64, 64) and config.env_config == {"sutton_barto_reward": True}
    assert config.seed == 7


def test_a_run_file_names_modules_to_import(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"import": ["json", "csv"], "num-workers": 0, "algo": "PPO"}))
    assert run_file_arguments(str(run), train_parser()) == [
        ("--import", "json"),
        ("--import", "csv"),
        ("--num-workers", "0"),
        ("--algo", "PPO"),
    ]
    assert parse(["train", "--config", str(run), "--import", "math"]).imports == ["json", "csv", "math"]
