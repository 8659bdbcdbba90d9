"""On a POPGym memory task in Ray mode, recurrent PPO learns what feed-forward PPO cannot."""

from __future__ import annotations

import pytest

from jaxflow import Algorithm

ENV = "popgym/RepeatPreviousEasy-v0"
ITERATIONS = 30
"""Of 512 env steps each: 15,360 steps. Measured, seeds 0, 1, 2: the recurrent policy's return
mean 0.56, 0.52, 0.53 (a few CPU-seconds of training); the feed-forward one's stays at -0.5."""
RECURRENT_AT_LEAST = 0.25
FEED_FORWARD_AT_MOST = -0.4
"""Naming the suit shown 4 steps back scores 1 an episode, a guess -0.5: one observation (the
suit shown now) says next to nothing of it, so no feed-forward policy does much better."""


def final_return(use_lstm: bool) -> float:
    recurrent = {"lstm_size": 64} if use_lstm else {}
    # gamma 0.5: an action changes no later observation or reward, so short horizons only cut variance.
    algo = Algorithm.build(
        "PPO", env=ENV, mode="ray", use_lstm=use_lstm, hidden_sizes=(64,), gamma=0.5, lr=3e-3, num_workers=0,
        num_envs_per_worker=16, rollout_fragment_length=32, train_batch_size=512, minibatch_size=128, seed=0,
        **recurrent,
    )  # fmt: skip
    try:
        for _ in range(ITERATIONS):
            result = algo.train()
    finally:
        algo.stop()
    return float(result["episode_return_mean"])


@pytest.mark.learning
def test_recurrent_ppo_beats_feed_forward_ppo_on_repeat_previous(ray_local):
    recurrent, feed_forward = final_return(True), final_return(False)
    assert recurrent >= RECURRENT_AT_LEAST and feed_forward <= FEED_FORWARD_AT_MOST, (recurrent, feed_forward)
