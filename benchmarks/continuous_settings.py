"""``continuous.py``'s settings: the envs and their budgets, the hyperparameters both libraries
get and how each library names them, and what one run measured (``Run``, ``Mark``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

CURVE_STEP = 1_000
"""Env steps between two points of a learning curve (jaxflow's min_env_steps_per_iteration)."""
WARM_POINTS = 2
"""Steady rates start at this curve point: past learning_starts (1,000 env steps of sampling
only; SB3 acts at random without its network there, jaxflow's workers act through theirs)
and the compilation of the first gradient steps (SBX's in learn() after learning_starts,
jaxflow's learner's in its first iteration)."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    episode_len: int
    steps: int
    """Default env-step budget of a run."""
    quick_steps: int
    device_env: str | None = None
    """The same task as a JAX env, for the device runners."""
    device_runners: tuple[str, ...] = ("device", "device-many")
    """The device runners this env takes (one env of a Brax task on a CPU would take hours)."""
    device_many_steps: int = 0
    """Env-step budget of a ``device-many`` run."""
    device_many_quick_steps: int = 0

    @property
    def window(self) -> int:
        """Episodes averaged into a curve's point: those of the last CURVE_STEP env steps."""
        return max(1, CURVE_STEP // self.episode_len)


ENVS = {
    "Pendulum-v1": EnvSpec(
        episode_len=200,
        steps=20_000,
        quick_steps=3_000,
        device_env="gymnax/Pendulum-v1",
        device_many_steps=200_000,
        device_many_quick_steps=40_000,
    ),
    # Brax's halfcheetah has gymnasium's reward (forward velocity minus 0.1 * |a|^2, 1,000-step
    # episodes) on its own physics: its returns are close to, not equal to, MuJoCo's.
    "HalfCheetah-v5": EnvSpec(
        episode_len=1_000,
        steps=30_000,
        quick_steps=3_000,
        device_env="brax/halfcheetah",
        device_runners=("device-many",),
        device_many_steps=200_000,
        device_many_quick_steps=40_000,
    ),
}
RUNNERS = ("sbx", "driver", "workers", "device", "device-many")
DEVICE_RUNNERS = ("device", "device-many")

# device-many: many envs stepped at once, one SGD step of 256 per 8 env steps (SHARED's is one
# per env step), a longer start and iterations of 10,000 env steps. The replay ratio is lower,
# so it needs several times SBX's env steps for the same return; it is judged on env steps/s
# at that return.
DEVICE_MANY = {
    "device.num_envs": 64,
    "rollout_fragment_length": 1,
    "samples_per_insert": 32.0,
    "learning_starts": 2_000,
    "min_env_steps_per_iteration": 10_000,
}

# The hyperparameters both libraries get, in one place; jaxflow_fields and sbx_kwargs map them
# to each library's names. One SGD step of 256 per env step, taken as 8 steps every 8 env steps
# (jaxflow's fragment of 8 steps from one env; SBX's train_freq=8, gradient_steps=8).
SHARED = {
    "lr": 3e-4,
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "gamma": 0.99,
    "tau": 0.005,
    "learning_starts": 1_000,
    "train_freq": 8,
    "gradient_steps": 8,
    "hidden_sizes": (256, 256),
}
PER_ALGO = {
    "SAC": {"initial_alpha": 1.0},  # target entropy -dim(A) in both
    "TD3": {"lr": 1e-3, "exploration_noise": 0.1, "target_noise": 0.2, "target_noise_clip": 0.5, "policy_delay": 2},
}
PER_ENV_ALGO = {("Pendulum-v1", "SAC"): {"lr": 1e-3}}  # rl-baselines3-zoo's Pendulum setting


def hyperparameters(env: str, algo: str) -> dict[str, Any]:
    return {**SHARED, **PER_ALGO[algo], **PER_ENV_ALGO.get((env, algo), {})}


def jaxflow_fields(
    hp: dict[str, Any], algo: str, runner: str, workers: int, device_envs: int = DEVICE_MANY["device.num_envs"]
) -> dict[str, Any]:
    """Config fields of a jaxflow run (``env`` and ``seed`` aside); ``device-many`` steps
    ``device_envs`` envs."""
    fields: dict[str, Any] = dict(
        lr=hp["lr"],
        buffer_size=hp["buffer_size"],
        train_batch_size=hp["batch_size"],
        gamma=hp["gamma"],
        tau=hp["tau"],
        learning_starts=hp["learning_starts"],
        rollout_fragment_length=hp["train_freq"],
        num_envs_per_worker=1,
        samples_per_insert=hp["gradient_steps"] * hp["batch_size"] / hp["train_freq"],
        hidden_sizes=tuple(hp["hidden_sizes"]),
        n_step=1,
        target_update_period=1,
        prioritized_replay=False,
        min_env_steps_per_iteration=CURVE_STEP,
    )
    num_workers = workers if runner == "workers" else 0
    if runner == "device":
        fields.update(mode="device", **{"device.num_envs": 1})
    elif runner == "device-many":
        fields.update(mode="device", **dict(DEVICE_MANY, **{"device.num_envs": device_envs}))
    else:
        # The replay stays in the driver's process with workers too: no shard actor's round trip.
        fields.update(mode="ray", num_workers=num_workers, replay_in_driver=True)
    if algo == "SAC":
        fields["initial_alpha"] = hp["initial_alpha"]
    else:
        fields.update({k: hp[k] for k in ("exploration_noise", "target_noise", "target_noise_clip", "policy_delay")})
        # SB3 acts uniformly at random until learning_starts; jaxflow's random_steps count per worker.
        fields["random_steps"] = -(-hp["learning_starts"] // max(1, num_workers))
    return fields


def sbx_kwargs(hp: dict[str, Any], algo: str) -> dict[str, Any]:
    """SBX constructor arguments (see ``sbx_run.py`` for ``net_arch`` and ``action_noise_std``)."""
    kwargs: dict[str, Any] = {
        "learning_rate": hp["lr"],
        "buffer_size": hp["buffer_size"],
        "batch_size": hp["batch_size"],
        "gamma": hp["gamma"],
        "tau": hp["tau"],
        "learning_starts": hp["learning_starts"],
        "train_freq": hp["train_freq"],
        "gradient_steps": hp["gradient_steps"],
        "net_arch": list(hp["hidden_sizes"]),
    }
    if algo == "SAC":
        kwargs.update(ent_coef=f"auto_{hp['initial_alpha']}", target_entropy="auto")
    else:
        kwargs.update(
            action_noise_std=hp["exploration_noise"],
            target_policy_noise=hp["target_noise"],
            target_noise_clip=hp["target_noise_clip"],
            policy_delay=hp["policy_delay"],
        )
    return kwargs


@dataclasses.dataclass(frozen=True)
class Mark:
    """Env steps, seconds into the training loop, gradient steps and CPU seconds (of the
    run's processes, since the loop began; None where not measured) at one curve point."""

    env_steps: int
    seconds: float
    grad_steps: int
    cpu_s: float | None = None


@dataclasses.dataclass
class Run:
    """One training run; a run that raised has ``error`` set and None for its measurements."""

    env: str
    algo: str
    runner: str
    seed: int
    load_at_start: float = 0.0
    """The 1-minute load average when the run began (other processes share the CPUs)."""
    build_s: float | None = None
    loop_s: float | None = None
    """Training alone (jaxflow's ``train()`` loop, SBX's ``learn()``), compilation included."""
    env_steps: int | None = None
    grad_steps: int | None = None
    env_steps_per_s: float | None = None
    steady_env_steps_per_s: float | None = None
    """After the second curve point (WARM_POINTS): without the sampling-only start and the
    first gradient steps' compilation, which the libraries place differently."""
    grad_steps_per_s: float | None = None
    """Gradient steps / seconds, both after the second curve point."""
    cpu_ms_per_grad_step: float | None = None
    """CPU milliseconds of the run's processes per gradient step, after the second curve point:
    what a loaded machine's wall clock cannot show (SBX's process; jaxflow's driver, its
    rollout worker actors and replay shard actors, if any)."""
    cpu_cores: float | None = None
    """Those CPU seconds per wall second after the second curve point: the cores the run kept
    busy (Ray's own processes, the raylet and the GCS, not counted)."""
    final_return: float | None = None
    curve: list[list[float | None]] = dataclasses.field(default_factory=list)
    """``[env steps, mean return of the last CURVE_STEP env steps' episodes]`` every CURVE_STEP."""
    error: str | None = None

    def timed(self, build_s: float, marks: list[Mark]) -> None:
        """Fills the rates from the curve points' marks (the last one: the loop's end)."""
        end, warm = marks[-1], marks[WARM_POINTS - 1] if len(marks) > WARM_POINTS else None
        self.build_s, self.loop_s, self.env_steps, self.grad_steps = build_s, end.seconds, end.env_steps, end.grad_steps
        self.env_steps_per_s = end.env_steps / end.seconds
        if warm and end.seconds > warm.seconds and end.env_steps > warm.env_steps:
            steady_s = end.seconds - warm.seconds
            self.steady_env_steps_per_s = (end.env_steps - warm.env_steps) / steady_s
            self.grad_steps_per_s = (end.grad_steps - warm.grad_steps) / steady_s
            if end.cpu_s is not None and warm.cpu_s is not None and end.grad_steps > warm.grad_steps:
                self.cpu_ms_per_grad_step = 1e3 * (end.cpu_s - warm.cpu_s) / (end.grad_steps - warm.grad_steps)
                self.cpu_cores = (end.cpu_s - warm.cpu_s) / steady_s
        self.final_return = self.curve[-1][1] if self.curve else None


def nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else x
