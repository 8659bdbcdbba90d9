"""The command line: bad input fails before any actor starts; list and evaluate work."""

from __future__ import annotations

import json

import pytest

import jaxflow.api.ray_program
from jaxflow.api import cli


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the input was validated")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--algo", "PPX"], "Unknown algorithm 'PPX'. Did you mean ['PPO'"),
        (["--algo", "ppo", "--env", "CartPol-v1"], "Did you mean one of ['CartPole-v1'"),
        (["--algo", "ppo", "--set", "lrr=0.1"], "has no field 'lrr'. Did you mean ['lr']"),
        (["--algo", "ppo", "--set", "lr=-1"], "PPOConfig.lr must satisfy 0 < value, got -1.0"),
        (["--algo", "ppo", "--set", "clip_eps=0"], "PPOConfig.clip_eps must satisfy 0 < value, got 0.0"),
        (["--algo", "ppo", "--set", "num_workers=two"], "PPOConfig.num_workers must be int, got 'two'"),
        (["--algo", "ppo", "--set", "on_worker_failure=retry"], "must be one of 'raise', 'ignore', 'restart'"),
        (["--algo", "ppo", "--set", "minibatch_size=4096"], "minibatch_size (4096) must be <= train_batch_size (1024)"),
        (["--algo", "ppo", "--stop", "reward=1"], "--stop takes KEY=NUMBER with KEY one of"),
        (
            ["--algo", "ppo", "--mode", "device"],
            "PPOConfig.mode='device' is not possible: 'CartPole-v1' is not a JAX environment",
        ),
        (["--algo", "a3c", "--env", "gymnax/CartPole-v1", "--mode", "device"], "A3C has no device mode"),
        (
            ["--algo", "ppo", "--env", "brax/inverted_pendulum", "--set", 'env_config={"backend": "physx"}'],
            "brax/inverted_pendulum: env_config backend='physx' is not a brax pipeline; allowed: generalized, mjx",
        ),
        (
            ["--algo", "dqn", "--env", "Pendulum-v1"],
            "DQN cannot act in environment 'Pendulum-v1': its action space is Box(-2.0, 2.0, (1,), float32), "
            "and DQN supports Discrete. Algorithms for Box action spaces: A2C, A3C, APEX_DDPG, APPO, DDPG, IMPALA, PPO, SAC, TD3",
        ),
        (["--algo", "dqn", "--env", "gymnax/Pendulum-v1"], "DQN cannot act in environment 'gymnax/Pendulum-v1'"),
        (["--algo", "ppo", "--num-seeds", "2"], "num_seeds > 1 and PPOConfig.sweep need device mode"),
        (
            ["--algo", "ppo", "--env", "gymnax/CartPole-v1", "--sweep", "lr=fast"],
            "--sweep takes FIELD=V1,V2,... with numbers",
        ),
        (
            ["--algo", "ppo", "--env", "gymnax/CartPole-v1", "--sweep", "num_epochs=1,2"],
            "'num_epochs' is not a float field",
        ),
    ],
)
def test_bad_input_fails_early_with_a_clear_message(no_ray, capsys, argv, message):
    assert cli.main(["train", *argv]) == 2
    assert message in capsys.readouterr().err


def test_list_names_algorithms_and_envs(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "algorithms: A2C, A3C, APEX, APEX_DDPG, APPO, DDPG, DQN, IMPALA, MAML, PPO, SAC, TD3" in out
    assert "for Box action spaces: A2C, A3C, APEX_DDPG, APPO, DDPG, IMPALA, PPO, SAC, TD3" in out
    assert "for Discrete action spaces: A2C, A3C, APEX, APPO, DQN, IMPALA, MAML, PPO" in out
    assert "with device mode (gymnax and brax envs): A2C, APPO, DDPG, DQN, IMPALA, PPO, SAC, TD3" in out
    assert "for policies of multi-agent runs (--multiagent FILE): A2C, DDPG, DQN, PPO, SAC, TD3" in out
    assert (
        "multiagent/Coordination-v0" in out and "multiagent/Rendezvous-v0" in out and "jaxflow/MaskedChoice-v0" in out
    )
    assert "CartPole-v1" in out and "gymnax/CartPole-v1" in out and "brax/inverted_pendulum" in out
    assert "Failed to import warp" not in out  # mujoco.mjx's note on importing brax, kept out


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
    env, _, report = capsys.readouterr().out.strip().partition(": ")
    out = json.loads(report)
    assert env == "tasks/PointNavigation-v0" and out["tasks"] == 3 and out["episodes"] == 3 * 2
    assert out["adaptation_gain"] == pytest.approx(out["post_adaptation_return"] - out["pre_adaptation_return"])


def test_train_runs_on_a_toy_text_env(ray_local, tmp_path, capsys):
    """FrozenLake's Discrete observations are one-hot encoded, no longer refused."""
    argv = ["--algo", "PPO", "--env", "FrozenLake-v1", "--num-workers", "1", "--stop", "training_iteration=1"]
    assert cli.main(["train", *argv, "--logdir", str(tmp_path), "--quiet"]) == 0
    assert "done: iteration 1, env steps 1,024" in capsys.readouterr().out
