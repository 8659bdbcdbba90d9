"""The rest of issue 44's command lines, one line each: sizes past their named bounds, seeds
past 64 bits, stop conditions a run can never meet (or has met), a field set twice, outputs
over existing files, unknown names. Each ends in one ``jaxflow: error: ...`` line on stderr,
exit status 2, before Ray starts, naming the thing and what is allowed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest
import ray

import jaxflow.api.ray_program
from jaxflow.api import checkpoint, cli
from jaxflow.api.cli_args import overrides, parse
from jaxflow.api.evaluation import EvaluationProgress
from jaxflow.api.registry import get_algorithm
from jaxflow.api.restore import state_template
from jaxflow.config.names import make_config
from jaxflow.config.parsing import to_json_dict

RESUMED_AT = 6
"""The iteration of the checkpoint the resume cases continue."""

TOO_MANY_WORKERS_TIMEOUT_S = 180
"""How long the subprocess refused for its workers may take: it starts Ray to learn the cluster's size."""

PPO = ["train", "--algo", "PPO", "--env", "CartPole-v1"]

# The words after `jaxflow` ({tmp}: a folder holding a file `file.txt`, an empty folder `empty`,
# a run with a checkpoint at iteration RESUMED_AT `run`, and a multi-agent file `ma.json`), and a
# fragment of the one line it ends in.
CASES = [
    # Sizes: at most MAX_SIZE (2**31 - 1, int32), layer widths at most MAX_LAYER_WIDTH.
    (
        [*PPO, "--set", "train_batch_size=1000000000000"],
        "PPOConfig.train_batch_size must satisfy 0 < value <= 2147483647 (MAX_SIZE), got 1000000000000",
    ),
    (
        [*PPO, "--set", "minibatch_size=1000000000000"],
        "PPOConfig.minibatch_size must satisfy 0 < value <= 2147483647 (MAX_SIZE)",
    ),
    (
        [*PPO, "--set", "rollout_fragment_length=3000000000"],
        "PPOConfig.rollout_fragment_length must satisfy 0 < value <= 2147483647",
    ),
    (
        [*PPO, "--set", "rollout_fragment_length=1000000", "--set", "num_envs_per_worker=10000"],
        "PPOConfig.rollout_fragment_length=1000000 x num_envs_per_worker=10000 is 10,000,000,000 steps a fragment; at most MAX_SIZE",
    ),
    (
        ["train", "--algo", "DQN", "--set", "buffer_size=10000000000"],
        "DQNConfig.buffer_size must satisfy 0 < value <= 2147483647 (MAX_SIZE)",
    ),
    (
        ["train", "--algo", "DQN", "--set", "learning_starts=10000000000"],
        "DQNConfig.learning_starts must satisfy 0 <= value <= 2147483647",
    ),
    (
        ["train", "--algo", "PPO", "--env", "gymnax/CartPole-v1", "--set", "num_envs=10000000000"],
        "PPOConfig.num_envs must satisfy 0 < value <= 2147483647",
    ),
    (
        ["train", "--algo", "PPO", "--env", "gymnax/CartPole-v1", "--num-seeds", "10000000000"],
        "PPOConfig.num_seeds must satisfy 0 < value <= 2147483647",
    ),
    (
        [*PPO, "--set", "hidden_sizes=64,100000000"],
        "PPOConfig.hidden_sizes must be layer widths from 1 to 32768 (MAX_LAYER_WIDTH), got (64, 100000000)",
    ),
    (
        [*PPO, "--set", "use_lstm=true", "--set", "lstm_size=1000000"],
        "PPOConfig.lstm_size must satisfy 0 < value <= 32768 (MAX_LAYER_WIDTH)",
    ),
    (
        [*PPO, "--set", "evaluation_episodes=1000000"],
        "PPOConfig.evaluation_episodes must satisfy 1 <= value <= 100000 (MAX_EVALUATION_EPISODES)",
    ),
    # Seeds: 0 to MAX_SEED (2**30 - 1), negative ones refused too.
    (
        [*PPO, "--seed", str(2**64 + 1)],
        f"PPOConfig.seed must satisfy 0 <= value <= 1073741823 (MAX_SEED), got {2**64 + 1}",
    ),
    ([*PPO, "--seed", "-1"], "PPOConfig.seed must satisfy 0 <= value <= 1073741823 (MAX_SEED), got -1"),
    (
        ["evaluate", "--checkpoint", "{tmp}/run", "--seed", str(2**64)],
        "--seed: must be an integer from 0 to 1073741823 (MAX_SEED)",
    ),
    # Evaluation's episodes: 1 to MAX_EVALUATION_EPISODES.
    (
        ["evaluate", "--checkpoint", "{tmp}/run", "--episodes", str(10**12)],
        "--episodes: must be an integer from 1 to 100000 (MAX_EVALUATION_EPISODES), got '1000000000000'",
    ),
    (["evaluate", "--checkpoint", "{tmp}/run", "--episodes", "0"], "--episodes: must be an integer from 1 to 100000"),
    # Outputs over what jaxflow did not write.
    (
        ["evaluate", "--checkpoint", "{tmp}/run", "--video", "{tmp}/file.txt"],
        "evaluate --video '{tmp}/file.txt' is a file, not a directory",
    ),
    (
        ["export", "--checkpoint", "{tmp}/run", "--out", "{tmp}/file.txt"],
        "export --out '{tmp}/file.txt' is a file, not a directory",
    ),
    (
        ["plot", "{tmp}/run", "--out", "{tmp}/curves.xyz"],
        "the file's suffix names its format, one of .png, .svg, .pdf; got .xyz",
    ),
    # Stop conditions the run never reports, or cannot count to.
    (
        [*PPO, "--stop", "evaluation/episode_return_mean=400"],
        "this run never evaluates (PPOConfig.evaluation_interval is 0), so it would never stop; add --set evaluation_interval=N",
    ),
    (
        ["train", "--multiagent", "{tmp}/ma.json", "--stop", "evaluation/episode_return_mean=9"],
        "a MultiAgentConfig run does not evaluate during training",
    ),
    (
        ["tune", "--algo", "PPO", "--stop", "evaluation/episode_return_mean=400"],
        "this run never evaluates (PPOConfig.evaluation_interval is 0)",
    ),
    (
        [*PPO, "--stop", "training_iteration=1.5"],
        "--stop training_iteration counts whole iterations: give an integer, got 1.5",
    ),
    (
        [*PPO, "--stop", "env_steps_sampled=100.5"],
        "--stop env_steps_sampled counts whole env steps: give an integer, got 100.5",
    ),
    # A resumed run already at or past its stop.
    (
        ["train", "--resume", "{tmp}/run", "--stop", "training_iteration=3"],
        f"--stop training_iteration=3: the run is already at training_iteration {RESUMED_AT} (",
    ),
    (
        ["train", "--resume", "{tmp}/run", "--stop", f"training_iteration={RESUMED_AT}"],
        f"give a bound above {RESUMED_AT} to train on",
    ),
    (
        ["train", "--resume", "{tmp}/run", "--stop", "env_steps_sampled=100"],
        "the run is already at env_steps_sampled 6144",
    ),
    (["train", "--resume", "{tmp}/run", "--stop", "evaluation/episode_return_mean=1"], "this run never evaluates"),
    # A field given twice, by a flag and --set or by two --set items.
    (
        [*PPO, "--num-workers", "0", "--set", "num_workers=-2"],
        "--set num_workers=-2 and --num-workers 0 set num_workers to different values; give it once",
    ),
    (
        [*PPO, "--num-workers", "2", "--set", "rollout.num_workers=3"],
        "--set rollout.num_workers=3 and --num-workers 2 set num_workers",
    ),
    ([*PPO, "--set", "lr=1e-3", "--set", "lr=1e-4"], "--set lr=1e-3 and --set lr=1e-4 set lr to different values"),
    ([*PPO, "--seed", "1", "--set", "seed=2"], "--set seed=2 and --seed 1 set seed"),
    ([*PPO, "--set", "num_workers=-2"], "PPOConfig.num_workers must satisfy 0 <= value, got -2"),
    # Unknown names.
    (["list", "--algo", "NOPE"], "Unknown algorithm 'NOPE'."),
    (["list", "--algo", "PP0"], "Unknown algorithm 'PP0'. Did you mean 'PPO'"),
    (["list", "--algo", "NOPE"], "Available: A2C, A3C, APEX"),
    (["list", "--fields"], "list --fields needs --algo NAME"),
    (["list", "--algo", "PPX", "--fields"], "Unknown algorithm 'PPX'. Did you mean 'PPO'"),
    (["list", "--algo", "PPO", "--fields", "--kind", "gymnax"], "list --fields shows one algorithm's settings"),
    # Counts of the command line's own.
    ([*PPO, "--keep-checkpoints", "-1"], "--keep-checkpoints: must be an integer >= 0, got '-1'"),
    (["tune", "--algo", "PPO", "--num-samples", "0"], "--num-samples: must be an integer >= 1, got '0'"),
]

MULTIAGENT = {
    "env": "multiagent/Coordination-v0",
    "policies": {"p": {"algorithm": "PPO"}},
    "mapping": {"agent_0": "p", "agent_1": "p"},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The folder ``{tmp}`` names: a PPO run whose checkpoint is at iteration RESUMED_AT (its
    state built, never trained), an empty folder, a file and a multi-agent file."""
    tmp = tmp_path_factory.mktemp("cli-table")
    spec = get_algorithm("PPO")
    config = make_config(spec.config_cls, env="CartPole-v1", num_workers=0, hidden_sizes=(8,))
    state = jax.device_get(state_template(config, spec).state)
    counters = {"training_iteration": RESUMED_AT, "env_steps_sampled": 1024 * RESUMED_AT, "time_s": 1.0}
    meta = {"algorithm": "PPO", "config": to_json_dict(config), "context": {"counters": counters}}
    checkpoint.save(str(tmp / "run"), RESUMED_AT, state, meta)
    (tmp / "run" / "config.json").write_text(json.dumps({"algorithm": "PPO", "config": to_json_dict(config)}))
    (tmp / "run" / "progress.jsonl").write_text(json.dumps({"training_iteration": 1, "env_steps_sampled": 1024}) + "\n")
    (tmp / "empty").mkdir()
    (tmp / "file.txt").write_text("not jaxflow's")
    (tmp / "ma.json").write_text(json.dumps(MULTIAGENT))
    return tmp


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the input was validated")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)
    monkeypatch.setattr(ray, "init", refuse)


@pytest.mark.parametrize("argv, message", CASES)
def test_one_line_before_ray_starts(no_ray, folder, capsys, argv, message):
    """Exit status 2, exactly one line on stderr naming the problem and what is allowed; Ray never starts."""
    before = sorted(os.listdir(folder))
    assert cli.main([a.replace("{tmp}", str(folder)) for a in argv]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("jaxflow: error: "), lines
    assert message.replace("{tmp}", str(folder)) in lines[0]
    assert sorted(os.listdir(folder)) == before  # a refused command writes nothing


def test_a_field_set_the_same_way_twice_is_taken(tmp_path):
    """Agreeing values pass (numbers compared as numbers); a run file's field is replaced by
    the command line's, whether the file gives it as a flag or under ``set``."""
    argv = ["train", "--algo", "PPO", "--num-workers", "2", "--set", "num_workers=2", "--set", "lr=0.001"]
    assert overrides(parse(argv + ["--set", "lr=1e-3"])) == {"num_workers": "2", "lr": "1e-3"}
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({"algo": "PPO", "num_workers": 2, "seed": 4, "set": {"lr": 0.1, "seed": 4}}))
    args = parse(["train", "--config", str(run_file), "--set", "num_workers=0", "--seed", "7", "--set", "lr=0.2"])
    assert overrides(args) == {"num_workers": "0", "lr": "0.2", "seed": "7"}


def test_evaluation_progress_speaks_only_in_long_evaluations(capsys):
    quiet = EvaluationProgress(100)  # every EVALUATION_PROGRESS_S: nothing within a short evaluation
    quiet(16)
    talking = EvaluationProgress(100, every_s=0.0)
    talking(16)
    talking(100)  # the last batch: the result line says it
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("jaxflow: evaluating: 16 of 100 episodes played, "), out


def test_too_many_workers_end_in_one_line_and_the_process_exits(tmp_path):
    """Workers the cluster has no room for are refused before the learner's warm-up (an update
    on their whole batch) starts, which exit would otherwise wait for: the process ends at once."""
    argv = [*PPO, "--num-workers", "100000", "--logdir", str(tmp_path / "run"), "--stop", "training_iteration=1"]
    done = subprocess.run(
        [sys.executable, "-m", "jaxflow.api.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TOO_MANY_WORKERS_TIMEOUT_S,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("jaxflow: error: ")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert errors == [errors[0]] and "rollout workers (num_workers=100000) need {'CPU': 100000.0} in all" in errors[0]
    assert "Traceback" not in done.stderr
