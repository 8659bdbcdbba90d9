"""Multi-agent runs on real Ray workers: routing of each agent's experiences to its policy,
PPO and DQN policies trained together on one set of workers, checkpoints, bad configs."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import jaxflow.api.ray_program
from jaxflow import Algorithm
from jaxflow.algorithms.multiagent import MultiAgentConfig
from jaxflow.api import cli
from jaxflow.config import make_config

COORDINATION, RPS = "multiagent/Coordination-v0", "multiagent/RockPaperScissors-v0"


def test_agents_mapped_to_one_policy_share_its_learner_and_batch():
    """Both RPS agents -> one PPO policy, sampled in the driver: the policy's fragment has one
    column per (agent, env), agent_1's columns are agent_1's observations (the one-hot of
    agent_0's previous action), and every env step counts once per agent."""
    T, B = 12, 3
    config = make_config(
        MultiAgentConfig,
        env=RPS,
        policies={"shared": {"algorithm": "PPO"}},
        mapping={"agent_0": "shared", "agent_1": "shared"},
        num_workers=0,
        num_envs_per_worker=B,
        rollout_fragment_length=T,
    )
    algo = Algorithm(config)
    try:
        assert list(algo.program.policies) == ["shared"]
        batch = algo.program.workers.local_worker.sample()
        shared = batch.policy_batches["shared"]
        assert batch.env_steps == T * B and shared.env_steps == T * 2 * B
        obs, actions = shared.data["obs"], shared.data["actions"]
        assert obs.shape == (T, 2 * B, 4) and actions.shape == (T, 2 * B)
        # Episodes are 10 steps: inside one, agent_1 (columns B..2B) sees agent_0's (columns 0..B) last action.
        for t in list(range(1, 10)) + [11]:
            np.testing.assert_array_equal(obs[t, B:, :3], np.eye(3)[actions[t - 1, :B]])
            np.testing.assert_array_equal(obs[t, :B, :3], np.eye(3)[actions[t - 1, B:]])
        assert len(shared.episode_returns) == 2 * B  # one 10-step episode per env, per agent
        np.testing.assert_allclose(shared.episode_returns[:B], -shared.episode_returns[B:])  # zero-sum
    finally:
        algo.stop()


PPO_AND_DQN = dict(
    env=COORDINATION,
    policies={
        "ppo": {"algorithm": "PPO", "config": {"train_batch_size": 512, "minibatch_size": 128}},
        "dqn": {"algorithm": "DQN", "config": {"learning_starts": 500}},
    },
    mapping={"agent_0": "ppo", "agent_1": "dqn"},
    num_workers=2,
    num_envs_per_worker=8,
    rollout_fragment_length=16,
    seed=0,
)


ITERATIONS = 6
"""Of 4,096 env steps (16 rounds): 24,576. Measured in 4 runs (one of them to 12 iterations):
both policies' returns passed 6 at iteration 2 (8.2 and 7.8) and were 9.8-9.9 from iteration 3
on; the greedy return was 20 of 20 at iteration 6."""


def test_ppo_and_dqn_policies_train_together_at_their_own_frequencies(ray_local, tmp_path):
    """The coordination game pays each agent 1 per step when both play the cue: 10 per episode
    at best, 10/9 for random play. In 6 iterations (25k env steps) both policies pass 6.
    PPO updates once per train batch of 512 of its agent's steps (2 rounds of 256), DQN once
    per round (32 SGD steps of 64), after its 500 learning-start transitions (2 rounds)."""
    algo = Algorithm(make_config(MultiAgentConfig, **PPO_AND_DQN))
    try:
        for _ in range(ITERATIONS):
            result = algo.train()
        ppo, dqn = result["policies"]["ppo"], result["policies"]["dqn"]
        sampler = result["sampler"]  # one clock for the worker's whole multi-agent fragment
        assert 0 < sampler["env_s"] + sampler["policy_s"] <= sampler["sample_s"] and sampler["policy_s"] > 0
        rounds = result["env_steps_sampled"] // (2 * 8 * 16)
        assert ppo["episode_return_mean"] > 6.0 and dqn["episode_return_mean"] > 6.0, result["policies"]
        # Up to 2 sampled rounds may still wait in a branch's duplicate() buffer when a result is
        # reported; DQN also skips the rounds before its replay holds learning_starts transitions
        # (2 rounds, or 4 when the asynchronous stores land after the first replay request).
        assert rounds // 2 - 1 <= ppo["num_updates"] <= rounds // 2 and ppo["sgd_steps"] == ppo["num_updates"] * 8 * 4
        assert rounds - 6 <= dqn["num_updates"] <= rounds and dqn["sgd_steps"] == dqn["num_updates"] * 32
        # One agent per policy: each saw every env step, up to the rounds still buffered for it.
        for p in (ppo, dqn):
            assert 0 <= result["env_steps_sampled"] - p["agent_steps_sampled"] <= 2 * 256
        greedy = algo.evaluate(episodes=10)
        assert greedy["return_mean"] > 12.0 and set(greedy["policies"]) == {"ppo", "dqn"}
        path = algo.save(str(tmp_path))
        weights = algo.program.get_weights()
    finally:
        algo.stop()
    restored = Algorithm.restore(path, num_workers=0)  # the policies' state alone is compared: no worker to start
    try:
        for pid in ("ppo", "dqn"):
            for a, b in zip(jax.tree.leaves(weights[pid]), jax.tree.leaves(restored.program.get_weights()[pid])):
                np.testing.assert_array_equal(a, b)
        assert restored.iteration == ITERATIONS
    finally:
        restored.stop()


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(mapping={"agent_0": "ppo"}), "no policy for agents ['agent_1']"),
        (dict(mapping={"agent_0": "ppo", "agent_1": "sac"}), "names undefined policies ['sac']"),
        (dict(policies={"ppo": {"algorithm": "A3C"}, "dqn": {"algorithm": "DQN"}}), "A3C cannot train a policy"),
        (
            dict(policies={"ppo": {"algorithm": "PPO", "config": {"num_workers": 4}}, "dqn": {"algorithm": "DQN"}}),
            "sets ['num_workers'], which the run's workers share",
        ),
        (
            dict(policies={"ppo": {"algorithm": "PPO", "config": {"clip": 0.1}}, "dqn": {"algorithm": "DQN"}}),
            "PPOConfig has no field 'clip'. Did you mean 'vf_clip' or 'clip_eps'?",
        ),
    ],
)
def test_bad_multiagent_configs_fail_before_any_actor_starts(monkeypatch, tmp_path, capsys, change, message):
    monkeypatch.setattr(
        jaxflow.api.ray_program, "init_ray", lambda *a, **k: pytest.fail("Ray started before validation")
    )
    path = tmp_path / "ma.json"
    path.write_text(json.dumps(dict(PPO_AND_DQN, **change)))
    assert cli.main(["train", "--multiagent", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_multiagent_env_needs_a_multiagent_config(capsys):
    assert cli.main(["train", "--algo", "PPO", "--env", COORDINATION]) == 2
    assert "is a multi-agent environment: train it with a multi-agent config" in capsys.readouterr().err


def test_cli_trains_a_multiagent_config(ray_local, tmp_path, capsys):
    path = tmp_path / "ma.json"
    path.write_text(json.dumps(dict(PPO_AND_DQN, num_workers=1)))
    logdir = tmp_path / "run"
    assert (
        cli.main(
            ["train", "--multiagent", str(path), "--stop", "training_iteration=2", "--logdir", str(logdir), "--quiet"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "MULTIAGENT on multiagent/Coordination-v0, mode ray (1 rollout workers)" in out and "iteration 2" in out
    progress = [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]
    assert set(progress[-1]["policies"]) == {"ppo", "dqn"}
    assert (logdir / "checkpoint_000002" / "replay_dqn").is_dir()
