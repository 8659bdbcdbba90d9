"""The command line: bad input fails before any actor starts; list and evaluate work."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import tuned_examples as tuned
from tensorboardX.proto import event_pb2

import jaxflow.api.ray_program
from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.logdir import claim_logdir, run_files
from jaxflow.api.loop import train
from jaxflow.config import ConfigError


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the input was validated")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)


MULTIAGENT_FILES = {
    "list.json": "[1, 2]",
    "broken.json": "{not json",
    "ppx.json": json.dumps(
        {"policies": {"p": {"algorithm": "PPX"}}, "mapping": {"agent_0": "p", "agent_1": "p"}},
    ),
    "a3c.json": json.dumps(
        {"policies": {"p": {"algorithm": "A3C"}}, "mapping": {"agent_0": "p", "agent_1": "p"}},
    ),
}

# Each bad command line: the words after `jaxflow` ({tmp}: a folder holding MULTIAGENT_FILES,
# an empty folder `empty` and a run's folder `run`) and a fragment of its one line.
BAD_INPUT = [
    (["train", "--algo", "PPX"], "Unknown algorithm 'PPX'. Did you mean 'PPO'"),
    (["train", "--algo", "ppo", "--env", "CartPol-v1"], "Did you mean one of ['CartPole-v1'"),
    (["train", "--algo", "ppo", "--env", "gymnax/Nope-v1"], "Unknown environment 'gymnax/Nope-v1'"),
    (["train", "--algo", "ppo", "--env", "multiagent/Coordination-v0"], "is a multi-agent environment"),
    (["train", "--algo", "ppo", "--set", "lrr=0.1"], "has no field 'lrr'. Did you mean 'lr'?"),
    (["train", "--algo", "ppo", "--set", "lr=-1"], "PPOConfig.lr must satisfy 0 < value, got -1.0"),
    (["train", "--algo", "ppo", "--set", "lr=inf"], "PPOConfig.lr must be a finite number, got inf"),
    (["train", "--algo", "ppo", "--set", "max_grad_norm=inf"], "PPOConfig.max_grad_norm must be a finite number"),
    (["train", "--algo", "ppo", "--set", "worker_timeout_s=inf"], "PPOConfig.worker_timeout_s must be a finite"),
    (["train", "--algo", "ppo", "--set", "gamma=nan"], "PPOConfig.gamma must be a finite number, got nan"),
    (["train", "--algo", "ppo", "--set", "clip_eps=0"], "PPOConfig.clip_eps must satisfy 0 < value, got 0.0"),
    (["train", "--algo", "ppo", "--set", "num_workers=two"], "PPOConfig.num_workers must be int, got 'two'"),
    (["train", "--algo", "ppo", "--set", "on_worker_failure=retry"], "must be one of 'raise', 'ignore', 'restart'"),
    (["train", "--algo", "ppo", "--set", "minibatch_size=4096"], "minibatch_size (4096) must be <= train_batch_size"),
    (["train", "--algo", "ppo", "--set", "lr"], "--set takes FIELD=VALUE, got 'lr'"),
    (["train", "--algo", "ppo", "--storage", "nosuch://b/run"], "storage 'nosuch://b/run' cannot be opened"),
    (["train", "--resume", "nosuch://b/run"], "storage 'nosuch://b/run' cannot be opened"),
    (["train", "--algo", "ppo", "--set", "=0.1"], "--set takes FIELD=VALUE, got '=0.1'"),
    (["train", "--algo", "ppo", "--set", "lr="], "PPOConfig.lr must be float, got ''"),
    (["train", "--algo", "ppo", "--set", "env_config={oops"], "PPOConfig.env_config must be dict, got '{oops'"),
    (["train", "--algo", "ppo", "--set", "env_config=[1]"], "PPOConfig.env_config must be dict, got '[1]'"),
    (["train", "--algo", "ppo", "--set", "hidden_sizes=a,b"], "PPOConfig.hidden_sizes must be tuple"),
    (["train", "--algo", "ppo", "--set", "rollout=3"], "PPOConfig.rollout must be RolloutConfig"),
    (
        ["train", "--algo", "ppo", "--set", "num_envs_per_worker=1000000000"],
        "PPOConfig.num_envs_per_worker must satisfy 1 <= value <= 10000, got 1000000000",
    ),
    (["train", "--algo", "ppo", "--set", "model=nowhere:Net"], "Model 'nowhere:Net' cannot be imported"),
    (
        ["train", "--algo", "ppo", "--seed", "-1"],
        "PPOConfig.seed must satisfy 0 <= value <= 1073741823 (MAX_SEED), got -1",
    ),
    (["train", "--algo", "ppo", "--seed", "x"], "train: argument --seed: invalid int value: 'x'"),
    (["train", "--algo", "ppo", "--num-workers", "-1"], "PPOConfig.num_workers must satisfy 0 <= value, got -1"),
    (["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--num-seeds", "0"], "num_seeds must satisfy 0 < value"),
    (
        ["train", "--algo", "ppo", "--num-seeds", "2"],
        "num_seeds > 1, PPOConfig.sweep and PPOConfig.pbt need device mode",
    ),
    (["train", "--algo", "ppo", "--num-seeds", "2", "--pbt", "lr"], "PPOConfig.pbt need device mode"),
    (["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--pbt", "lr"], "pbt needs a population of at least 2"),
    (
        ["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--num-seeds", "2", "--pbt", "lr,hidden_sizes"],
        "PPOConfig.pbt: 'hidden_sizes' is not a hyperparameter population-based training can perturb",
    ),
    (["train", "--algo", "ppo", "--stop", "reward=1"], "--stop takes KEY=NUMBER with KEY one of"),
    (["train", "--algo", "ppo", "--stop", "time_s=soon"], "--stop time_s needs a number, got 'soon'"),
    (["train", "--algo", "ppo", "--stop", "episode_return_mean=nan"], "needs a finite number, got nan"),
    (["train", "--algo", "ppo", "--stop", "env_steps_sampled=inf"], "needs a finite number, got inf"),
    (["train", "--algo", "ppo", "--stop", "training_iteration=0"], "--stop training_iteration must be above 0"),
    (
        ["train", "--algo", "ppo", "--stop", "time_s=5", "--stop", "time_s=9"],
        "--stop time_s is given twice (5 and 9)",
    ),
    (["train", "--algo", "ppo", "--checkpoint-every", "-1"], "--checkpoint-every: must be an integer >= 0, got '-1'"),
    (["train", "--algo", "ppo", "--mode", "fast"], "argument --mode: invalid choice: 'fast'"),
    (
        ["train", "--algo", "ppo", "--mode", "device"],
        "PPOConfig.mode='device' is not possible: 'CartPole-v1' is not a JAX environment",
    ),
    (["train", "--algo", "a3c", "--env", "gymnax/CartPole-v1", "--mode", "device"], "A3C has no device mode"),
    (
        ["train", "--algo", "ppo", "--env", "brax/inverted_pendulum", "--set", 'env_config={"backend": "physx"}'],
        "brax/inverted_pendulum: env_config backend='physx' is not a brax pipeline; allowed: generalized, mjx",
    ),
    (
        ["train", "--algo", "dqn", "--env", "Pendulum-v1"],
        "DQN cannot act in environment 'Pendulum-v1': its action space is Box(-2.0, 2.0, (1,), float32), "
        "and DQN supports Discrete. Algorithms for Box action spaces: A2C, A3C, APEX_DDPG, APPO, ARS, DDPG, DDPPO, ES, IMPALA, PPO, SAC, TD3",
    ),
    (["train", "--algo", "dqn", "--env", "gymnax/Pendulum-v1"], "DQN cannot act in environment 'gymnax/Pendulum-v1'"),
    (["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--sweep", "lr=fast"], "--sweep takes FIELD=V1,V2,..."),
    (["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--sweep", "num_epochs=1,2"], "is not a float field"),
    (["train", "--algo", "ppo", "--env", "gymnax/CartPole-v1", "--sweep", "lr=1e-3,inf"], "lr must be a finite"),
    (["train", "--algo", "ppo", "--address", "nowhere"], "--address 'nowhere': expected HOST:PORT"),
    (["train", "--algo", "ppo", "--address", "127.0.0.1:1"], "--address '127.0.0.1:1': no Ray cluster answers"),
    (["train"], "train needs --algo NAME, --multiagent FILE, --config FILE or --resume LOGDIR"),
    (["train", "--config", "{tmp}/missing.json"], "--config {tmp}/missing.json: cannot read it as JSON"),
    (["train", "--config", "{tmp}/list.json"], "--config {tmp}/list.json: expected a JSON object of train's flags"),
    (["train", "--config", "{tmp}/run-typo.json"], "'num_worker' is not a flag a run file may give; allowed: ["),
    (["train", "--config", "{tmp}/run-resume.json"], "'resume' is not a flag a run file may give"),
    (["train", "--config", "{tmp}/run-switch.json"], "'quiet' is a switch; give true or false, got 'yes'"),
    (["train", "--config", "{tmp}/run-set.json"], "'set' takes an object of KEY: VALUE, got ['lr=1']"),
    (
        ["train", "--config", "{tmp}/run-int.json"],
        "run-int.json: train: argument --num-workers: invalid int value: 'two'",
    ),
    (["train", "--config", "{tmp}/run-lr.json"], "PPOConfig.lr must satisfy 0 < value, got -1.0"),
    (
        ["train", "--algo", "ppo", "--set", "model=user_models:GRUActorCritic", "--set", "lstm_size=32"],
        "PPOConfig.lstm_size=32 with model='user_models:GRUActorCritic': the model decides its own recurrent core",
    ),
    (["train", "--config", "{tmp}/run-core.json"], "IMPALAConfig.lstm_size=16 with model='user_models:GRUActor"),
    (["train", "--algo"], "train: argument --algo: expected one argument"),
    (["train", "--algo", "ppo", "--logdir", "{tmp}/run"], "already holds a run (config.json, progress.jsonl)"),
    (["train", "--algo", "ppo", "--logdir", "{tmp}/list.json"], "is a file, not a directory"),
    (["train", "--resume", "{tmp}/empty"], "No checkpoint under {tmp}/empty"),
    (["train", "--resume", "{tmp}/run", "--overwrite"], "--overwrite replaces a run and --resume continues one"),
    (["train", "--resume", "{tmp}/run", "--algo", "ppo"], "leave out --algo and --multiagent"),
    (["train", "--algo", "ppo", "--multiagent", "{tmp}/a3c.json"], "leave out --algo"),
    (["train", "--multiagent", "{tmp}/missing.json"], "missing.json: cannot be read as a JSON file (No such file"),
    (["train", "--multiagent", "{tmp}/empty"], "empty: cannot be read as a JSON file (Is a directory)"),
    (["train", "--multiagent", "{tmp}/broken.json"], "broken.json: not valid JSON"),
    (["train", "--multiagent", "{tmp}/list.json"], "list.json: a MultiAgentConfig is a JSON object of its fields"),
    (["train", "--multiagent", "{tmp}/ppx.json"], "Unknown algorithm 'PPX'"),
    (["train", "--multiagent", "{tmp}/a3c.json"], "A3C cannot train a policy of a multi-agent run"),
    (["evaluate", "--checkpoint", "{tmp}/missing"], "--checkpoint '{tmp}/missing': no such file or directory"),
    (["evaluate", "--checkpoint", "{tmp}/empty"], "No checkpoint under {tmp}/empty"),
    (["evaluate", "--checkpoint", "{tmp}/empty", "--episodes", "0"], "--episodes: must be an integer from 1 to 100000"),
    (["evaluate", "--checkpoint", "{tmp}/empty", "--episodes", "-5"], "--episodes: must be an integer from 1 to"),
    (["evaluate", "--checkpoint", "{tmp}/empty", "--seed", "-3"], "--seed: must be an integer from 0 to 1073741823"),
    (["evaluate"], "evaluate: the following arguments are required: --checkpoint"),
    (["train", "--algo", "ppo", "--logger", "tensorbord"], "--logger takes a comma-separated list out of"),
    (["train", "--algo", "ppo", "--stop", "evaluation/episode_return_mean=inf"], "needs a finite number"),
    (["export", "--checkpoint", "{tmp}/missing", "--out", "{tmp}/x"], "--checkpoint '{tmp}/missing': no such file"),
    (["export", "--checkpoint", "{tmp}/empty", "--out", "{tmp}/x"], "No checkpoint under {tmp}/empty"),
    (["plot", "{tmp}/empty"], "is not a run directory: it has no progress.jsonl"),
    (["plot", "{tmp}/run", "--x", "steps"], "argument --x: invalid choice: 'steps'"),
    (["fit"], "argument command: invalid choice: 'fit'"),
    ([], "the following arguments are required: command"),
]


RUN_FILES = {
    "run-typo.json": '{"algo": "PPO", "num_worker": 2}',
    "run-resume.json": '{"resume": "runs/x"}',
    "run-switch.json": '{"algo": "PPO", "quiet": "yes"}',
    "run-set.json": '{"algo": "PPO", "set": ["lr=1"]}',
    "run-int.json": '{"algo": "PPO", "num_workers": "two"}',
    "run-lr.json": '{"algo": "PPO", "set": {"lr": -1}}',
    "run-core.json": '{"algo": "IMPALA", "set": {"model": "user_models:GRUActorCritic", "lstm_size": 16}}',
}


JAXFLOW_CONFIG = '{"algorithm": "PPO", "config": {}}'
"""A run's config.json as jaxflow writes it (the algorithm and its config): what marks a run as jaxflow's."""


@pytest.fixture
def files(tmp_path):
    for name, text in {**MULTIAGENT_FILES, **RUN_FILES}.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "empty").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(JAXFLOW_CONFIG)
    (tmp_path / "run" / "progress.jsonl").write_text("")
    return tmp_path


@pytest.mark.parametrize("argv, message", BAD_INPUT)
def test_bad_input_fails_early_in_one_line(no_ray, files, capsys, argv, message):
    """Exit status 2 and one line on stderr naming the problem; no traceback, and Ray never starts."""
    assert cli.main([a.replace("{tmp}", str(files)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxflow: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert message.replace("{tmp}", str(files)) in err and "Traceback" not in err


def test_debug_shows_the_traceback_and_internal_errors_keep_theirs(no_ray, monkeypatch, capsys):
    for argv in (["--debug", "train", "--algo", "PPX"], ["train", "--algo", "PPX", "--debug"]):
        with pytest.raises(ConfigError, match="Unknown algorithm 'PPX'"):
            cli.main(argv)

    # A bug of jaxflow's (here a KeyError) is no user error: its traceback, never a bare key.
    def broken(*args):
        raise KeyError("algorithm")

    monkeypatch.setattr(cli, "_describe", broken)
    with pytest.raises(KeyError):
        cli.main(["train", "--algo", "PPO"])
    assert capsys.readouterr().err == ""


def test_overwrite_replaces_only_the_old_runs_files(no_ray, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint_000010").mkdir(parents=True)
    for name in ("progress.jsonl", "events.out.tfevents.1.host", "notes.txt"):
        (run / name).write_text("x")
    (run / "config.json").write_text(JAXFLOW_CONFIG)
    (run / ".tmp-checkpoint_000020-0a1b2c3d").mkdir()
    (run / ".old-checkpoint_000010-0a1b2c3d").mkdir()
    assert run_files(str(run)) == sorted(set(os.listdir(run)) - {"notes.txt"})
    with pytest.raises(ConfigError, match="already holds a run"):
        claim_logdir(str(run))
    # A run refused before it starts (no_ray stops it where Ray would start) changes nothing:
    # --overwrite clears the old run's files once the new run is built, when train() claims the logdir.
    before = sorted(os.listdir(run))
    with pytest.raises(AssertionError, match="Ray was started"):
        cli.main(["train", "--algo", "PPO", "--logdir", str(run), "--overwrite", "--quiet"])
    assert sorted(os.listdir(run)) == before
    claim_logdir(str(run), overwrite=True)
    assert os.listdir(run) == ["notes.txt"]
    # A folder of other files is no run: a new run is refused there, and --overwrite removes nothing of it.
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="exists and is not a run jaxflow wrote: it holds notes.txt"):
            claim_logdir(str(run), overwrite)
    assert os.listdir(run) == ["notes.txt"]


def test_list_names_algorithms_and_envs():
    """``jaxflow list`` as a user runs it: a fresh process (none of this session's registrations),
    its stdout and stderr whole (what libraries print from C included)."""
    env = {**os.environ, "JAXFLOW_LIST_CACHE": "off"}  # every env made, as the first listing does
    argv = [sys.executable, "-m", "jaxflow.api.cli", "list"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=LIST_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stderr
    out, err = done.stdout, done.stderr
    assert (
        "algorithms: A2C, A3C, APEX, APEX_DDPG, APPO, ARS, DDPG, DDPPO, DQN, ES, IMPALA, MAML, PPO, R2D2, Rainbow, SAC, TD3"
        in out
    )
    assert "for Box action spaces: A2C, A3C, APEX_DDPG, APPO, ARS, DDPG, DDPPO, ES, IMPALA, PPO, SAC, TD3" in out
    assert (
        "for Discrete action spaces: A2C, A3C, APEX, APPO, ARS, DDPPO, DQN, ES, IMPALA, MAML, PPO, R2D2, Rainbow" in out
    )
    assert "with device mode (gymnax and brax envs): A2C, APPO, DDPG, DQN, IMPALA, PPO, R2D2, Rainbow, SAC, TD3" in out
    assert "for policies of multi-agent runs (--multiagent FILE): A2C, DDPG, DQN, PPO, Rainbow, SAC, TD3" in out
    assert (
        "multiagent/Coordination-v0" in out and "multiagent/Rendezvous-v0" in out and "jaxflow/MaskedChoice-v0" in out
    )
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "obs Box(4,) float32" in rows["CartPole-v1"] and "act Discrete(2)" in rows["CartPole-v1"]
    assert rows["CartPole-v1"].endswith(
        "A2C A3C APEX APPO ARS DDPPO DQN ES IMPALA PPO R2D2 Rainbow"
    )  # programs of their own too (ES, ARS, DD-PPO; MAML on the task distributions)
    assert "act Box(1,) [-2, 2]" in rows["Pendulum-v1"] and " SAC TD3" in rows["Pendulum-v1"]
    assert "DQN" not in rows["Pendulum-v1"] and "A3C" not in rows["gymnax/Pendulum-v1"]  # no device mode
    assert "obs Box(4, 84, 84) uint8" in rows["ALE/<Game>-v5"] and "ALE/Pong-v5" not in rows  # one line for all
    assert "brax/inverted_pendulum" in out and "gymnax/CartPole-v1" in rows
    # POPGym: each id its own line (their spaces differ), gymnasium's "popgym-" names not again
    assert "obs Box(4,) [0, 1]" in rows["popgym/RepeatPreviousEasy-v0"] and "PPO" in rows["popgym/CountRecallEasy-v0"]
    assert "popgym-RepeatPreviousEasy-v0" not in rows
    assert "act Discrete(7)" in rows["navix/<name>"] and "PPO" in rows["jumanji/<name>"]  # a line per JAX library
    # hidden by default: older versions, raw Atari frames, envs whose dependencies are missing
    assert not {"CartPole-v0", "Hopper-v2", "PongNoFrameskip-v4", "GymV26Environment-v0"} & set(rows)
    assert "Failed to import warp" not in out + err and "A.L.E" not in out + err  # libraries' banners kept out


def test_list_filters_by_algorithm_and_kind_and_all_says_why(capsys):
    assert cli.main(["list", "--algo", "sac", "--kind", "gymnax"]) == 0
    out = capsys.readouterr().out
    assert "gymnax/Pendulum-v1" in out and "gymnax/CartPole-v1" not in out and "CartPole-v1 " not in out
    assert "brax/" not in out and "multiagent/" not in out
    from jaxflow.api.listing_probe import _hidden_reason

    ids = ["CartPole-v0", "CartPole-v1", "Pong-v4", "ALE/Pong-v5", "Taxi-v4"]
    assert [_hidden_reason(i, ids) for i in ids] == [
        "a newer version exists",
        "",
        "raw Atari frames: ALE/<Game>-v5 comes preprocessed",
        "",
        "",
    ]


def test_evaluate_reports_greedy_returns(ray_local, tmp_path, capsys):
    algo = jaxflow.Algorithm.build("PPO", num_workers=1, seed=0)
    try:
        for _ in range(40):
            algo.train()
        algo.save(str(tmp_path))
        in_process = algo.evaluate(episodes=5, seed=11)
    finally:
        algo.stop()
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path), "--episodes", "5", "--seed", "11"]) == 0
    out = capsys.readouterr().out
    # Same greedy policy, same seeds: the CLI and the Python API agree exactly.
    assert f"mean {in_process['return_mean']:.2f}" in out
    assert in_process["return_mean"] > 100


def test_evaluate_adapts_a_maml_checkpoint_to_held_out_tasks(tmp_path, capsys):
    algo = jaxflow.Algorithm.build("MAML", meta_batch_size=2, episodes_per_task=2, iterations_per_call=1)
    algo.train()
    algo.save(str(tmp_path))
    algo.stop()
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path), "--episodes", "3", "--seed", "5"]) == 0
    said, result = capsys.readouterr().out.strip().splitlines()
    assert said == f"jaxflow: evaluating {tmp_path / 'checkpoint_000001'}"  # the checkpoint played, named
    env, _, report = result.partition(": ")
    out = json.loads(report)
    assert env == "tasks/PointNavigation-v0" and out["tasks"] == 3 and out["episodes"] == 3 * 2
    assert out["adaptation_gain"] == pytest.approx(out["post_adaptation_return"] - out["pre_adaptation_return"])


def test_train_runs_on_a_toy_text_env(ray_local, tmp_path, capsys):
    """FrozenLake's Discrete observations are one-hot encoded, no longer refused."""
    argv = ["--algo", "PPO", "--env", "FrozenLake-v1", "--num-workers", "1", "--stop", "training_iteration=1"]
    assert cli.main(["train", *argv, "--logdir", str(tmp_path), "--quiet"]) == 0
    assert "done: iteration 1, env steps 1,024" in capsys.readouterr().out


def test_train_runs_a_tuned_example_with_flags_over_it(ray_local, tmp_path, capsys):
    """The file gives the algorithm, env, seed and stop conditions; the flags given replace its
    number of workers and add a stop condition and a setting, and the run's config.json shows both."""
    argv = ["--config", tuned.path("ppo-cartpole"), "--stop", "training_iteration=1", "--num-workers", "0"]
    assert cli.main(["train", *argv, "--set", "lr=1e-4", "--logdir", str(tmp_path), "--quiet"]) == 0
    assert "jaxflow: PPO on CartPole-v1, mode ray (auto) (0 rollout workers)" in capsys.readouterr().out
    config = json.loads((tmp_path / "config.json").read_text())["config"]
    assert config["seed"] == 0 and config["optimizer"]["lr"] == 1e-4 and config["rollout"]["num_workers"] == 0
    lines = (tmp_path / "progress.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["training_iteration"] == 1


LIST_TIMEOUT_S = 300


TINY_PPO = dict(
    num_workers=0,
    num_envs_per_worker=2,
    rollout_fragment_length=8,
    train_batch_size=16,
    minibatch_size=16,
    num_epochs=1,
)


def _tensorboard_scalars(logdir, tag):
    """``tag``'s (step, value) pairs as TensorBoard shows them: the event files in name order
    (TFRecords: length, its CRC, an Event, its CRC), and a SessionLog START at step s
    discarding the events read before it at steps >= s (TensorBoard's purge)."""
    shown, raw = [], []
    for name in sorted(n for n in os.listdir(logdir) if n.startswith("events.out.tfevents")):
        data, pos = open(os.path.join(logdir, name), "rb").read(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            if event.session_log.status == event_pb2.SessionLog.START:
                shown = [(s, v) for s, v in shown if s < event.step]
            found = [(event.step, v.simple_value) for v in event.summary.value if v.tag == tag]
            shown += found
            raw += found
    return shown, raw


def test_a_resumed_run_logs_each_iteration_and_step_once(ray_local, tmp_path):
    """Trained to iteration 4 with a checkpoint at 2, restored from it and trained to 4 again:
    progress.jsonl holds iterations 1..4 once, and TensorBoard one value per step; stop
    conditions that could never hold, or hold already, are refused as on the command line."""
    logdir, taken = str(tmp_path / "run"), tmp_path / "taken"
    taken.mkdir()
    (taken / "config.json").write_text(JAXFLOW_CONFIG)
    algo = Algorithm.build("PPO", **TINY_PPO)
    # A new run (iteration 0) refuses a logdir holding a run, and bad arguments, before it trains.
    with pytest.raises(ConfigError, match="already holds a run"):
        train(algo, {"training_iteration": 4}, str(taken))
    with pytest.raises(ConfigError, match="--stop time_s needs a finite number, got nan"):
        train(algo, {"time_s": float("nan")}, logdir)
    with pytest.raises(ConfigError, match="checkpoint_every must be an int >= 0"):
        train(algo, {"training_iteration": 4}, logdir, checkpoint_every=-1)
    first = train(algo, {"training_iteration": 4}, logdir, checkpoint_every=2, verbose=False)
    # train() refuses what the command line refuses: a bound the run has reached (it would
    # train one more iteration past it) and a key the run never reports (it would never stop).
    with pytest.raises(ConfigError, match=r"training_iteration=4: the run is already at training_iteration 4 \(this"):
        train(algo, {"training_iteration": 4}, logdir)
    with pytest.raises(ConfigError, match=r"evaluation/episode_return_mean: this run never evaluates"):
        train(algo, {"evaluation/episode_return_mean": 100.0}, logdir)
    assert algo.iteration == 4
    algo.stop()
    resumed = Algorithm.restore(os.path.join(logdir, "checkpoint_000002"))
    assert resumed.iteration == 2
    with pytest.raises(ConfigError, match="this algorithm continues one at iteration 2"):
        train(resumed, {"training_iteration": 4}, logdir, overwrite=True)
    second = train(resumed, {"training_iteration": 4}, logdir, checkpoint_every=2, verbose=False)
    resumed.stop()

    rows = [json.loads(line) for line in open(os.path.join(logdir, "progress.jsonl"))]
    per_iteration = first["env_steps_sampled"] // 4
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["env_steps_sampled"] for r in rows] == [per_iteration * i for i in range(1, 5)]
    assert rows[-1]["env_steps_sampled"] == second["env_steps_sampled"]
    shown, raw = _tensorboard_scalars(logdir, "training_iteration")
    # Both runs wrote iterations 3 and 4; TensorBoard shows each step once, in order.
    assert sorted(raw) == sorted([(per_iteration * i, float(i)) for i in (1, 2, 3, 4, 3, 4)])
    assert shown == [(per_iteration * i, float(i)) for i in range(1, 5)]


def test_help_imports_neither_jax_nor_ray():
    """``jaxflow --help`` answers at once: the command line loads the engine only for a command."""
    script = (
        "import sys\nfrom jaxflow.api.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('jax', 'ray', 'gymnasium', 'jaxflow.envs') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"jaxflow {version('jaxflow-rl')}\n"


MY_ENVS = '''
import gymnasium
import numpy as np
from jaxflow import envs


class Timer(gymnasium.Env):
    """Three steps of reward 1 whatever the actions."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t / 3, np.float32), 1.0, self.t >= 3, False, {}


envs.register("mine/Timer-v0", lambda context, **kw: Timer())
'''


def test_import_brings_a_users_env_to_the_cli_and_its_workers(ray_local, tmp_path, monkeypatch, capsys):
    """A module beside the command (not installed, not on the workers' path) registers an env;
    the run's Ray worker steps it."""
    (tmp_path / "my_envs_for_cli.py").write_text(MY_ENVS)
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--import", "my_envs_for_cli", "--algo", "PPO", "--env", "mine/Timer-v0", "--num-workers", "1"]
    argv += ["--set", "train_batch_size=64", "--set", "minibatch_size=32", "--stop", "training_iteration=1"]
    assert cli.main([*argv, "--logdir", str(tmp_path / "run"), "--quiet"]) == 0
    last = json.loads((tmp_path / "run" / "progress.jsonl").read_text().splitlines()[-1])
    assert last["episode_return_mean"] == 3.0 and last["num_healthy_workers"] == 1
    assert cli.main(["train", "--import", "no_such_module_here", "--algo", "PPO"]) == 2
    assert "--import no_such_module_here: no module named 'no_such_module_here'" in capsys.readouterr().err
