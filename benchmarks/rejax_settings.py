"""rejax's own gymnax settings (its ``configs/gymnax/cartpole.yaml`` and ``pendulum.yaml``) and
the same settings as jaxflow config fields, for ``device_vs_rejax.py``.

rejax's off-policy loops collect one step in each of ``num_envs`` envs, then take
``num_epochs`` gradient steps of ``batch_size``: in jaxflow, fragments of 1 step from
``num_envs`` envs and ``samples_per_insert = num_epochs * batch_size / num_envs``. rejax's
``polyak`` is the target's share kept per update: jaxflow's ``tau = 1 - polyak`` every update.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setting:
    """One algorithm's comparison: rejax's config, jaxflow's algorithm and env, the target return."""

    rejax: dict[str, Any]
    jaxflow_algo: str
    env: str
    target: float

    def steps(self, scale: float) -> int:
        """The env-step budget: rejax's ``total_timesteps`` times ``scale``."""
        return max(1, round(self.rejax["total_timesteps"] * scale))


EVALUATION_EPISODES = 128
"""rejax's evaluation: 128 greedy episodes (``rejax.evaluate``'s number in ``Algorithm.create``)."""
REJAX_HIDDEN_SIZES = (64, 64)
"""rejax's networks when its config names none (every config here): two layers of 64."""
CARTPOLE, PENDULUM = "gymnax/CartPole-v1", "gymnax/Pendulum-v1"
SETTINGS = {
    "ppo": Setting(
        dict(
            env="CartPole-v1",
            agent_kwargs={"activation": "tanh"},
            num_envs=5,
            num_steps=100,
            num_epochs=5,
            num_minibatches=5,
            learning_rate=0.00075,
            max_grad_norm=0.5,
            total_timesteps=100_000,
            eval_freq=5_000,
            gamma=0.99,
            gae_lambda=0.95,
            clip_eps=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
        ),
        "PPO",
        CARTPOLE,
        450.0,
    ),
    "dqn": Setting(
        dict(
            env="CartPole-v1",
            agent="DuelingQNetwork",
            agent_kwargs={"activation": "swish"},
            num_envs=10,
            buffer_size=50_000,
            fill_buffer=5_000,
            batch_size=100,
            max_grad_norm=10,
            learning_rate=0.001,
            num_epochs=5,
            total_timesteps=100_000,
            eval_freq=2_500,
            polyak=0.98,
            eps_start=1,
            eps_end=0.05,
            exploration_fraction=0.5,
            gamma=0.99,
            ddqn=True,
            normalize_observations=False,
        ),
        "DQN",
        CARTPOLE,
        450.0,
    ),
    "sac": Setting(
        dict(
            env="Pendulum-v1",
            agent_kwargs={"activation": "swish"},
            num_envs=1,
            buffer_size=10_000,
            fill_buffer=256,
            batch_size=256,
            learning_rate=0.01,
            num_epochs=1,
            total_timesteps=10_000,
            eval_freq=500,
            gamma=0.99,
            polyak=0.98,
            target_entropy_ratio=None,
            normalize_observations=True,
        ),
        "SAC",
        PENDULUM,
        -200.0,
    ),
    "td3": Setting(
        dict(
            env="Pendulum-v1",
            actor_kwargs={"activation": "swish"},
            critic_kwargs={"activation": "swish"},
            num_envs=1,
            buffer_size=10_000,
            fill_buffer=1_000,
            batch_size=100,
            learning_rate=0.001,
            num_epochs=1,
            total_timesteps=10_000,
            eval_freq=500,
            gamma=0.99,
            polyak=0.95,
            max_grad_norm=100,
            exploration_noise=0.3,
            target_noise=0.2,
            target_noise_clip=0.5,
            policy_delay=2,
            normalize_observations=True,
        ),
        "TD3",
        PENDULUM,
        -200.0,
    ),
}
"""rejax's eval_freq is raised where its yaml evaluates more often than every 5,000 (PPO) or 500
(SAC, TD3) env steps; every other value is the yaml's."""


def jaxflow_fields(algo: str, steps: int, iterations_per_call: int | None) -> dict[str, Any]:
    """rejax's settings for ``algo`` as jaxflow config fields (device mode, one worker's envs)."""
    r = SETTINGS[algo].rejax
    fields: dict[str, Any] = {"num_workers": 1, "num_envs_per_worker": r["num_envs"], "lr": r["learning_rate"]}
    fields["hidden_sizes"] = REJAX_HIDDEN_SIZES
    # rejax's evaluation, the same work: 128 greedy episodes every eval_freq env steps, one result each.
    steps_per_iteration = r["num_envs"] * r.get("num_steps", 1)
    fields |= dict(
        evaluation_interval=max(1, r["eval_freq"] // steps_per_iteration),
        evaluation_episodes=EVALUATION_EPISODES,
        min_env_steps_per_iteration=r["eval_freq"],
    )
    if "max_grad_norm" in r:
        fields["max_grad_norm"] = float(r["max_grad_norm"])
    if iterations_per_call is not None:
        fields["iterations_per_call"] = iterations_per_call
    if algo == "ppo":
        batch = r["num_envs"] * r["num_steps"]
        return fields | dict(
            rollout_fragment_length=r["num_steps"],
            train_batch_size=batch,
            minibatch_size=batch // r["num_minibatches"],
            num_epochs=r["num_epochs"],
            gamma=r["gamma"],
            gae_lambda=r["gae_lambda"],
            clip_eps=r["clip_eps"],
            ent_coef=r["ent_coef"],
            vf_coef=r["vf_coef"],
        )
    fields |= dict(
        rollout_fragment_length=1,
        buffer_size=r["buffer_size"],
        learning_starts=r["fill_buffer"],
        train_batch_size=r["batch_size"],
        samples_per_insert=r["num_epochs"] * r["batch_size"] / r["num_envs"],
        gamma=r["gamma"],
        tau=round(1.0 - r["polyak"], 6),
        target_update_period=1,
        normalize_observations=r["normalize_observations"],
    )
    if algo == "dqn":
        return fields | dict(
            dueling=True,
            double_q=r["ddqn"],
            prioritized_replay=False,
            n_step=1,
            epsilon_initial=float(r["eps_start"]),
            epsilon_final=r["eps_end"],
            epsilon_timesteps=round(r["exploration_fraction"] * steps),
        )
    if algo == "td3":
        return fields | dict(
            exploration_noise=r["exploration_noise"],
            target_noise=r["target_noise"],
            target_noise_clip=r["target_noise_clip"],
            policy_delay=r["policy_delay"],
            random_steps=r["fill_buffer"],
        )
    return fields
