"""Rainbow's parts learn CartPole-v1: QR-DQN reaches 450 within 200k env steps, and Rainbow
(every part on, C51's head among them) within DQN's budget of 200k (test_learning.py's DQN
test, Ray mode). Each run is a tuned example (``examples/tuned/``); C51 alone
(``c51-gymnax-cartpole``, 450 at 182k when written) is left to Rainbow's run, for the suite's time.

Fixed seeds and the configs' defaults but where named. C51 and QR-DQN run in device mode
(in Ray mode, whose sampling varies from run to run, C51 reached 450 at 125k in some runs and 343 by 200k in one fresh-clone CI; QR-DQN
reached it at 115k on one rollout worker, at twice the test's time); C51's support is CartPole's return range ``[0, 100]`` (DQN's
default is Atari's ``[-10, 10]`` of clipped rewards) and both replay 4 transitions per sampled
one (DQN's 8 reach 450 about 10% later, at twice the SGD steps). Rainbow runs in device mode
on gymnax's CartPole-v1 (its noise drawn in the compiled rollout on every step), where a run
is reproducible step for step, with hidden layers 64 wide (DQN's 128 reach 450 about as
soon, at twice the cost of an SGD step). In Ray mode, whose asynchronous sampling varies from
run to run, Rainbow reached 450 at 139k-145k steps in some runs here and not within 200k in another.
"""

from __future__ import annotations

import pytest
import tuned_examples as tuned

import jaxflow.algorithms.rainbow  # noqa: F401 - registers Rainbow where the installed entry points predate it

pytestmark = pytest.mark.learning


@pytest.mark.parametrize("example", ["qr-dqn-gymnax-cartpole", "rainbow-gymnax-cartpole"])
def test_reaches_450_within_200k_steps(ray_local, example):
    result, algo, stop = tuned.run(example)
    # The last iteration (device mode: the last call) may overshoot the budget.
    last = algo.program.steps_per_iteration * algo.config.device.iterations_per_call if algo.mode == "device" else 2048
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + last
    assert result["learner"]["mean_abs_td_error"] > 0
