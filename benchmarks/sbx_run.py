"""One Stable-Baselines-Jax (SBX) training run, for ``continuous.py``: run by the Python of
SBX's own virtual environment (``benchmarks/.venvs/sbx``), never imported by jaxflow.

    python sbx_run.py '{"algo": "SAC", "env": "Pendulum-v1", "seed": 0, "steps": 10000, "mark_every": 1000, "kwargs": {...}}'

``kwargs`` are SBX's own constructor arguments (``continuous.py`` maps the shared
hyperparameters to them), except ``net_arch`` (into ``policy_kwargs``) and
``action_noise_std`` (Gaussian exploration noise in the normalized action space, SB3's
``NormalActionNoise``). Prints one JSON line: build and learn() seconds, env steps, gradient
steps, every ended training episode as ``[env steps at its end, return]`` and every
``mark_every`` env steps ``[env steps, seconds into learn(), gradient steps, CPU seconds of
this process into learn()]``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from typing import Any

import numpy as np
from sbx import SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import NormalActionNoise

ALGORITHMS = {"SAC": SAC, "TD3": TD3}


class Recorder(BaseCallback):
    """Every ended episode's return (from SB3's Monitor wrapper) with the env steps so far,
    and the clock, gradient steps and CPU clock every ``mark_every`` env steps."""

    def __init__(self, mark_every: int) -> None:
        super().__init__()
        self.mark_every = mark_every
        self.episodes: list[list[float]] = []
        self.marks: list[list[float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append([self.num_timesteps, float(info["episode"]["r"])])
        if self.num_timesteps % self.mark_every == 0:
            self.marks.append([self.num_timesteps, time.perf_counter(), self.model._n_updates, time.process_time()])
        return True


def build(algo: str, env: str, seed: int, kwargs: dict[str, Any]) -> Any:
    kwargs = dict(kwargs)
    policy_kwargs = {"net_arch": list(kwargs.pop("net_arch"))}
    noise_std = kwargs.pop("action_noise_std", None)
    model = ALGORITHMS[algo]("MlpPolicy", env, policy_kwargs=policy_kwargs, seed=seed, verbose=0, **kwargs)
    if noise_std is not None:
        n = model.action_space.shape[0]
        model.action_noise = NormalActionNoise(np.zeros(n), np.full(n, noise_std))
    return model


def main() -> None:
    spec = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    model = build(spec["algo"], spec["env"], spec["seed"], spec["kwargs"])
    recorder = Recorder(spec["mark_every"])
    t1, cpu1 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=spec["steps"], callback=recorder)
    t2, cpu2 = time.perf_counter(), time.process_time()
    print(
        json.dumps(
            {
                "build_s": t1 - t0,
                "loop_s": t2 - t1,
                "loop_cpu_s": cpu2 - cpu1,
                "env_steps": int(model.num_timesteps),
                "grad_steps": int(model._n_updates),
                "episodes": recorder.episodes,
                "marks": [[steps, t - t1, updates, cpu - cpu1] for steps, t, updates, cpu in recorder.marks],
                "versions": {p: version(p) for p in ("sbx-rl", "stable_baselines3", "jax", "torch", "gymnasium")},
            }
        )
    )


if __name__ == "__main__":
    main()
