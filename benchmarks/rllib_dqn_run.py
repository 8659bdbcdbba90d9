"""One run of RLlib's tuned CartPole DQN, for ``dqn_vs_rllib.py``: run by the Python of
RLlib's own virtual environment (``benchmarks/.venvs/rllib``), never imported by jaxflow.

    python rllib_dqn_run.py '{"seed": 0, "max_steps": 200000, "target": 450, "window": 100}'

The config is RLlib's example ``rllib/examples/algorithms/dqn/cartpole_dqn.py`` (double,
dueling, n-step drawn from 2-5, prioritized replay of 50k, one tanh layer of 256 and heads of
256, Adam 5e-4, batches of 32, epsilon 1 -> 0.02 over 25k env steps) with RLlib's defaults
for everything else (the local env runner, one env). Training stops once RLlib's own
``episode_return_mean`` and the mean of the last ``window`` ended episodes have both reached
``target``, or at ``max_steps``. Prints one JSON line: versions, build and training seconds,
every ended episode as ``[env steps at its end, return]`` and every iteration as ``[env
steps, seconds into training, RLlib's episode_return_mean]``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.tune.registry import register_env

ENV = "CartPole-v1"
RECORDED_ENV = "RecordedCartPole"
EPISODES: list[list[float]] = []
"""Every ended episode, ``[env steps at its end, return]``. The env runner is local (RLlib's
default of no remote env runners), so its env steps in this process. (An episode handed to
RLlib's ``on_episode_end`` callback is only its last chunk, so the env counts instead.)"""


class Recorder(gym.Wrapper):
    """``CartPole-v1`` that appends each ended episode to :data:`EPISODES`, counting every env step."""

    steps = 0

    def reset(self, **kwargs: Any) -> Any:
        self.episode_return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        Recorder.steps += 1
        self.episode_return += float(reward)
        if terminated or truncated:
            EPISODES.append([Recorder.steps, self.episode_return])
        return obs, reward, terminated, truncated, info


register_env(RECORDED_ENV, lambda _: Recorder(gym.make(ENV)))


def make_config(seed: int) -> DQNConfig:
    """RLlib's example, as its script builds it with no arguments, on the recording CartPole, with the seed."""
    return (
        DQNConfig()
        .environment(env=RECORDED_ENV)
        .training(
            lr=0.0005,
            train_batch_size_per_learner=32,
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 50_000,
                "alpha": 0.6,
                "beta": 0.4,
            },
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (25_000, 0.02)],
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                fcnet_bias_initializer="zeros_",
                head_fcnet_hiddens=[256],
                head_fcnet_bias_initializer="zeros_",
            ),
        )
        .debugging(seed=seed)
    )


def main(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    algo = make_config(spec["seed"]).build_algo()
    build_s = time.perf_counter() - start
    iterations: list[list[float]] = []
    start = time.perf_counter()
    while True:
        result = algo.train()
        runners = result.get(ENV_RUNNER_RESULTS, {})
        steps = int(runners.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
        reported = float(runners.get(EPISODE_RETURN_MEAN, float("nan")))
        iterations.append([steps, time.perf_counter() - start, reported])
        last = [r for _, r in EPISODES[-spec["window"] :]]
        windowed = float(np.mean(last)) if len(last) == spec["window"] else float("-inf")
        if (reported >= spec["target"] and windowed >= spec["target"]) or steps >= spec["max_steps"]:
            break
    algo.stop()
    return {
        "versions": {p: version(p) for p in ("ray", "torch", "gymnasium")},
        "build_s": build_s,
        "train_s": time.perf_counter() - start,
        "episodes": EPISODES,
        "iterations": iterations,
    }


if __name__ == "__main__":
    # Through the module, not __main__: Ray pickles the registered env creator, and a function
    # of __main__ would be pickled with a copy of EPISODES that this process never sees.
    import rllib_dqn_run

    print(json.dumps(rllib_dqn_run.main(json.loads(sys.argv[1]))))
