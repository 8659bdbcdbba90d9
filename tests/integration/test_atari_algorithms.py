"""IMPALA and Ape-X on a real Atari game, end to end on small settings: conv networks
chosen for frame stacks, train batches through ToDevice, frame-stack replay rows."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm, ConfigError
from jaxflow.networks.conv import ConvActorCritic, ConvQNetwork
from jaxflow.policies import Greedy

TINY = dict(env="ALE/Pong-v5", num_workers=1, num_envs_per_worker=2, rollout_fragment_length=16, seed=0)


@pytest.mark.parametrize("vector_env", ["python", "ale"])
def test_impala_trains_on_pong(ray_local, vector_env):
    algo = Algorithm.build("IMPALA", train_batch_size=32, min_env_steps_per_iteration=96, vector_env=vector_env, **TINY)
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    assert isinstance(algo.network, ConvActorCritic)
    last = results[-1]
    assert last["num_updates"] >= 1 and last["env_steps_trained"] >= 32
    # uint8 frames went to the device, each once: a transfer is one train batch, one fragment of
    # 2 envs x (16 + 4) frames (whole stacks would be 2 x 17 x 4), plus under 1% for actions,
    # rewards and the like. (Transfers, not batches: a transfer may be prefetched, not yet trained.)
    frame_mb = 2 * (16 + 4) * 84 * 84 / 1e6
    assert last["to_device"]["megabytes"] == pytest.approx(last["to_device"]["transfers"] * frame_mb, rel=0.01)
    assert last["learner"]["policy_lag"] >= 0
    # The Nature CNN convolves by matrix products on the CPU, so the SGD steps stay in one scan.
    assert algo.learner.loop == "scan"
    sampler = last["sampler"]  # the worker's time, from its fragments: emulator, policy, the rest
    assert sampler["env_s"] > 0 and sampler["policy_s"] > 0
    assert sampler["env_s"] + sampler["policy_s"] <= sampler["sample_s"]


def test_apex_replays_rebuilt_frame_stacks_on_pong(ray_local):
    algo = Algorithm.build(
        "APEX",
        frame_stack=4,
        num_replay_shards=1,
        buffer_size=2_000,
        learning_starts=64,
        train_batch_size=16,
        replay_batch_size=32,
        min_env_steps_per_iteration=128,
        **dict(TINY, num_workers=1),
    )
    try:
        results = [algo.train() for _ in range(2)]
        stats = algo.replay.stats()[0]
    finally:
        algo.stop()
    assert isinstance(algo.network, ConvQNetwork) and isinstance(algo.policy.distribution, Greedy)
    assert results[-1]["num_updates"] >= 1
    # Single 84x84 frames per row: well under two rows per transition, far from 8 frames' worth.
    assert stats["size"] < 1.5 * stats["inserted"]
    assert stats["bytes"] < stats["capacity"] * (84 * 84 + 200)


def test_ale_vector_env_is_refused_for_other_envs():
    with pytest.raises(ConfigError, match="vector_env='ale' runs ALE/<Game>-v5 environments only"):
        Algorithm.build("IMPALA", env="CartPole-v1", vector_env="ale")
