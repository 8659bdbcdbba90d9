"""Running a policy's greedy actions for a number of episodes, on the host."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxflow import envs
from jaxflow.config.constants import EVALUATION_SEED_OFFSET
from jaxflow.policies.policy import Policy


def evaluate_policy(config: Any, policy: Policy, params: Any, episodes: int, seed: int | None = None) -> dict[str, Any]:
    """Mean and standard deviation of the greedy policy's return over ``episodes`` episodes
    of ``config.env``, stepped on the host."""
    seed = config.seed + EVALUATION_SEED_OFFSET if seed is None else seed
    env = envs.make_cpu(config.env, envs.EnvContext(seed=seed), **config.env_config)
    act = jax.jit(policy.greedy)
    returns, lengths = [], []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        done, total, n = False, 0.0, 0
        while not done:
            action = np.asarray(act(params, np.asarray(obs, np.float32)[None]))[0]
            action = action.item() if action.ndim == 0 else action
            obs, r, terminated, truncated, _ = env.step(action)
            total, n, done = total + float(r), n + 1, terminated or truncated
        returns.append(total)
        lengths.append(n)
    env.close()
    r = np.asarray(returns)
    return {
        "episodes": episodes,
        "return_mean": float(r.mean()),
        "return_std": float(r.std()),
        "returns": returns,
        "lengths": lengths,
    }
