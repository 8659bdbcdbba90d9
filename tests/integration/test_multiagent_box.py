"""Multi-agent runs with Box (continuous) policies, on the Rendezvous game: the env receives
each policy's stored sample clipped and rescaled to its Box (read back from the positions the
agents observe), greedy evaluation does the same, and a PPO and a SAC policy train together,
save, restore and evaluate alike."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxflow import Algorithm, envs, get_algorithm
from jaxflow.algorithms.multiagent import MultiAgentConfig, load_multiagent_config
from jaxflow.config import make_config
from jaxflow.rollout.evaluation import evaluate_policies
from jaxflow.rollout.multiagent import MultiAgentRolloutWorker, MultiAgentWorkerSpec
from jaxflow.rollout.worker import WorkerSpec

RENDEZVOUS, MAX_SPEED, EPISODE_LENGTH = "multiagent/Rendezvous-v0", 0.25, 10
T, B = 20, 4
SMALL = {"hidden_sizes": (32, 32)}


def rendezvous_config(policies: dict, **changes) -> MultiAgentConfig:
    return make_config(
        MultiAgentConfig,
        env=RENDEZVOUS,
        policies=policies,
        mapping={"agent_0": "first", "agent_1": "second"},
        **changes,
    )


def test_the_env_gets_each_policys_sample_clipped_and_rescaled():
    """A multi-agent worker samples 20 steps of 4 envs (episodes of 10): PPO (agent_0) stores
    its Gaussian's unclipped sample, TD3 (agent_1) its noisy actor's action; each agent's next
    position is its position plus ``0.25 * clip(action, -1, 1)``, stopped at the line's ends,
    and the reward is minus the new distance (agent_0 observes both positions; TD3's replay
    rows hold the rewards)."""
    config = rendezvous_config(
        {
            "first": {"algorithm": "PPO", "config": SMALL},
            "second": {"algorithm": "TD3", "config": {**SMALL, "random_steps": 0, "exploration_noise": 0.5}},
        },
        num_envs_per_worker=B,
        rollout_fragment_length=T,
    )
    env, specs = envs.make_multiagent(RENDEZVOUS), {}
    for pid in config.policies:
        spec, pconfig = config.policy_spec(pid), config.policy_config(pid)
        policy = spec.policy(pconfig, env.observation_space("agent_0"), env.action_space("agent_0"))
        specs[pid] = WorkerSpec(pconfig, policy, spec.postprocess, None, spec.workers.encode, spec.workers.explore)
    worker = MultiAgentRolloutWorker(MultiAgentWorkerSpec(config, specs, config.mapping), index=0)
    params = {pid: jax.jit(s.policy.init)(jax.random.PRNGKey(0)) for pid, s in specs.items()}  # one compile each
    worker.set_weights(params, {"first": 0, "second": 0})
    batch = worker.sample()
    worker.close()
    ppo = batch.policy_batches["first"].data
    positions, a0 = ppo["obs"][..., :2].astype(np.float64), ppo["actions"][..., 0]  # [T, B, (x0, x1)], [T, B]
    assert a0.dtype == np.float32 and (np.abs(a0) > 1).mean() > 0.1  # unclipped: std 1 at initialisation
    # TD3's fragment is stored as replay rows, T + 1 per env (one per observation), row t holding action t.
    rows = batch.policy_batches["second"].data.rows
    a1, r1 = (rows[k].reshape(B, T + 1)[:, :T].T for k in ("actions", "rewards"))
    assert np.abs(a1).max() <= 1.0 and np.abs(a1).max() > 0.5
    within = [t for t in range(T - 1) if (t + 1) % EPISODE_LENGTH]  # steps whose next obs is not a reset's
    velocity = MAX_SPEED * np.clip(np.stack([a0, a1], axis=-1), -1.0, 1.0)
    expected = np.clip(positions[within] + velocity[within], -1.0, 1.0)
    np.testing.assert_allclose(positions[[t + 1 for t in within]], expected, atol=1e-6)
    distance = np.abs(expected[..., 0] - expected[..., 1])
    np.testing.assert_allclose(r1[within], -distance, atol=1e-6)  # one-step returns, no truncation inside episodes


def constant_mean(params, value: float):
    """PPO's parameters with each output layer of width 1 (the Gaussian's mean, and the value)
    returning ``value`` for every observation; the log-std (``free_inputs``) is kept."""

    def fix(path, leaf):
        name = jax.tree_util.keystr(path[-1:])
        if "kernel" in name and leaf.shape[-1] == 1:
            return np.zeros_like(leaf)
        return np.full_like(leaf, value) if "bias" in name and leaf.shape == (1,) else leaf

    return jax.tree_util.tree_map_with_path(fix, params)


def test_greedy_evaluation_clips_and_rescales_box_actions():
    """Greedy means of +5 (agent_0) and -5 (agent_1): clipped to 1 and rescaled to 0.25, the
    agents run apart to the ends. Each episode's return is then computed by hand from the
    starts the seed draws (uniform on [-1, 1], one pair per episode, from the evaluation seed)."""
    ppo = {"algorithm": "PPO", "config": SMALL}
    config = rendezvous_config({"first": ppo, "second": ppo})
    spec, env = get_algorithm("PPO"), envs.make_multiagent(RENDEZVOUS)
    policies, params = {}, {}
    for pid, mean in (("first", 5.0), ("second", -5.0)):
        policies[pid] = spec.policy(
            config.policy_config(pid), env.observation_space("agent_0"), env.action_space("agent_0")
        )
        params[pid] = constant_mean(policies[pid].init(jax.random.PRNGKey(0)), mean)
    result = evaluate_policies(config, policies, params, config.mapping, episodes=3, seed=7)
    rng, steps = np.random.default_rng(7), np.arange(1, EPISODE_LENGTH + 1)
    expected = []
    for _ in range(3):
        x0, x1 = rng.uniform(-1.0, 1.0, 2)
        gap = np.minimum(x0 + MAX_SPEED * steps, 1.0) - np.maximum(x1 - MAX_SPEED * steps, -1.0)
        expected.append(-2 * np.abs(gap).sum())  # summed over both agents
    np.testing.assert_allclose(result["returns"], expected, rtol=1e-5)
    assert result["policies"]["first"] == result["policies"]["second"] == pytest.approx(result["return_mean"] / 2)


def test_ppo_and_sac_policies_train_save_restore_and_evaluate_alike(ray_local, tmp_path):
    """Sampling in the driver (and SAC's replay in it too); three iterations of 256 env
    steps: PPO updates every round of 128 of its agent's steps, SAC from its 128 learning-start
    transitions on. The restored run (whose saved config holds SAC's hidden sizes as a JSON
    list) has the same weights and evaluates to the same greedy returns on the same seed."""
    config = rendezvous_config(
        {
            "first": {"algorithm": "PPO", "config": {**SMALL, "train_batch_size": 128, "minibatch_size": 64}},
            "second": {
                "algorithm": "SAC",
                "config": {**SMALL, "learning_starts": 128, "train_batch_size": 64, "samples_per_insert": 8.0},
            },
        },
        num_workers=0,
        num_envs_per_worker=8,
        rollout_fragment_length=16,
        min_env_steps_per_iteration=256,
        seed=0,
    )
    algo = Algorithm(config)
    try:
        initial = algo.program.get_weights()
        for _ in range(3):
            result = algo.train()
        weights = algo.program.get_weights()
        before = algo.evaluate(episodes=3, seed=5)
        path = algo.save(str(tmp_path))
    finally:
        algo.stop()
    for pid in ("first", "second"):
        stats = result["policies"][pid]
        assert stats["num_updates"] > 0 and all(np.isfinite(v) for v in stats["learner"].values()), stats
        changed = [
            not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(initial[pid]), jax.tree.leaves(weights[pid]))
        ]
        assert any(changed), pid
    assert "critic_loss" in result["policies"]["second"]["learner"]
    assert len(before["returns"]) == 3 and all(-2 * 2.0 * EPISODE_LENGTH <= r <= 0 for r in before["returns"])
    restored = Algorithm.restore(path)
    try:
        assert restored.program.config.policy_config("second").hidden_sizes == (32, 32)
        for pid in ("first", "second"):
            for a, b in zip(jax.tree.leaves(weights[pid]), jax.tree.leaves(restored.program.get_weights()[pid])):
                np.testing.assert_array_equal(a, b)
        after = restored.evaluate(episodes=3, seed=5)
    finally:
        restored.stop()
    assert after["returns"] == before["returns"] and after["policies"] == before["policies"]


def test_a_multiagent_config_file_sets_tuple_fields_of_a_policy(tmp_path):
    path = tmp_path / "ma.json"
    policies = {"first": {"algorithm": "SAC", "config": {"hidden_sizes": [16, 8]}}, "second": {"algorithm": "PPO"}}
    path.write_text(
        json.dumps({"env": RENDEZVOUS, "policies": policies, "mapping": {"agent_0": "first", "agent_1": "second"}})
    )
    assert load_multiagent_config(str(path)).policy_config("first").hidden_sizes == (16, 8)
