"""``gymnax/MemoryChain-bsuite`` through jaxflow's gymnax adapter: each step returns the
observation of the state it reached, and the observation space holds every observation."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.envs.memory_chain import MemoryChain

LENGTH = 3


@pytest.mark.parametrize("action, reward", [(0, -1.0), (1, 1.0)])
def test_the_context_is_seen_first_only_and_the_last_action_is_rewarded_by_it(action, reward):
    env, params = envs.make("gymnax/MemoryChain-bsuite", memory_length=LENGTH)
    assert isinstance(env, MemoryChain)
    space = env.observation_space(params)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    context = 2 * int(state.context[0]) - 1  # shown as -1 or +1
    seen = [np.asarray(obs)]
    rewards, dones = [], []
    for t in range(LENGTH + 1):
        obs, state, r, done, _truncated, info = env.step(jax.random.fold_in(key, t), state, action, params)
        seen.append(np.asarray(info["final_observation"] if done else obs))
        rewards.append(float(r))
        dones.append(bool(done))
    # The time left falls by 1/LENGTH a step, from the very first step on (gymnax's own port
    # returned the state before the step: the context twice, everything one step late).
    want = [[1 - t / LENGTH, 0.0, context if t == 0 else 0.0] for t in range(LENGTH + 2)]
    np.testing.assert_allclose(np.stack(seen), want, atol=1e-6)
    assert all(bool(space.contains(o)) for o in seen)
    # Action 1 names the context +1: reward +1 if right, -1 if wrong, on the last step only.
    assert rewards == [0.0] * LENGTH + [reward * context] and dones == [False] * LENGTH + [True]
