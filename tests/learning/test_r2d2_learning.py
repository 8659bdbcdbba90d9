"""R2D2 learns CartPole with the velocities hidden, in device mode (no Ray), within a stated
env-step budget: the tuned example ``examples/tuned/r2d2-stateless-cartpole.json``."""

from __future__ import annotations

import pytest
import tuned_examples as tuned

import jaxflow.algorithms.r2d2  # noqa: F401  (registers R2D2 where the installed entry points predate it)

pytestmark = pytest.mark.learning


def test_r2d2_greedy_policy_reaches_400_on_stateless_cartpole_within_100k_steps():
    """The training returns mix the 16 envs' epsilons (0.4 down to 0.4^8), so the policy is
    judged greedily (10 episodes after each compiled call of 4,000 env steps, its LSTM state
    carried): 400 within 100k env steps; seed 0 reaches it at 28k here."""
    result, algo, stop = tuned.run("r2d2-stateless-cartpole")
    assert algo.mode == "device"
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + 4_000
    assert result["episode_return_mean"] < result["evaluation"]["episode_return_mean"]  # the envs explore
