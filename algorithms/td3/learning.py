"""TD3's pure functions (Fujimoto et al., 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"): exploration noise on the workers and on the device, the clipped
double-Q target with target policy smoothing, the deterministic policy gradient, and the
optimizer that delays the actor's steps. DDPG is the same with the additions off."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxflow.algorithms.sac.learning import actor_inputs, critic_loss, critic_values
from jaxflow.algorithms.td3.config import TD3Config
from jaxflow.learn import every_k_steps, make_optimizer
from jaxflow.networks import MLPContinuousQ
from jaxflow.policies import Policy

Array = jax.Array
ACTOR = "actor_torso"
"""The actor's sub-tree in the parameters (:class:`~jaxflow.networks.ActorCritics`)."""


def explore(
    rng: np.random.Generator, inputs: np.ndarray, config: TD3Config, worker_index: int, env_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Worker-side: uniform actions for the first ``random_steps``, then ``clip(tanh(inputs)
    + N(0, exploration_noise^2), -1, 1)``; log-probabilities 0 (the actor is deterministic)."""
    del worker_index
    return noisy_actions(rng, inputs, config.exploration_noise, env_steps < config.random_steps)


def noisy_actions(
    rng: np.random.Generator, inputs: np.ndarray, noise: float, uniform: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``clip(tanh(inputs) + N(0, noise^2), -1, 1)``, or uniform actions; log-probabilities 0."""
    shape, zeros = inputs.shape, np.zeros(inputs.shape[0], np.float32)
    if uniform:
        return rng.uniform(-1.0, 1.0, shape).astype(np.float32), zeros
    noisy = np.tanh(inputs) + noise * rng.standard_normal(shape)
    return np.clip(noisy, -1.0, 1.0).astype(np.float32), zeros


def explore_on_device(key: Array, inputs: Array, env_steps: Array, config: TD3Config) -> tuple[Array, Array]:
    """Device mode's :func:`explore`, with the run's exact env step count."""
    k_uniform, k_noise = jax.random.split(key)
    noisy = jnp.tanh(inputs) + config.exploration_noise * jax.random.normal(k_noise, inputs.shape)
    uniform = jax.random.uniform(k_uniform, inputs.shape, minval=-1.0, maxval=1.0)
    actions = jnp.where(env_steps < config.random_steps, uniform, jnp.clip(noisy, -1.0, 1.0))
    return actions, jnp.zeros(inputs.shape[:1], jnp.float32)


def smoothed_target_actions(key: Array, mu_t: Array, noise: float, noise_clip: float) -> Array:
    """``clip(mu'(s') + clip(N(0, noise^2), -noise_clip, noise_clip), -1, 1)``: target policy smoothing."""
    eps = jnp.clip(noise * jax.random.normal(key, mu_t.shape), -noise_clip, noise_clip)
    return jnp.clip(mu_t + eps, -1.0, 1.0)


def first_critic(policy: Policy, params: Any, obs: Array, actions: Array) -> Array:
    """``Q_1(s, a) [B]`` alone, from critic 0's slice of the stacked critics' parameters: the
    actor's loss reads no other critic, so no other is computed or differentiated (about a
    tenth of TD3's update)."""
    q0 = jax.tree.map(lambda x: x[0], params["params"]["q"])
    return cast(Array, MLPContinuousQ(policy.network.hidden_sizes).apply({"params": q0}, obs, actions))


def loss(
    params: Any,
    batch: Mapping[str, Array],
    rng: Array,
    target_params: Any,
    *,
    policy: Policy,
    config: TD3Config,
    step: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Critic loss to ``y = r + discount * min_i Q_i'(s', a~')`` (the minimum over one critic
    for DDPG) plus the actor loss ``-Q_1(s, mu(s))``; the critics take no gradient from the
    actor loss. How often the actor steps is the optimizer's business (:func:`optimizer`);
    given the SGD ``step``, the actor loss and its gradient are computed only on the steps
    that apply it (a ``lax.cond``; evaluating it in between cost about 5% of the update). Its
    metric ``actor_loss`` is then ``policy_delay`` times the loss on those steps and 0 in
    between, so its mean over any ``policy_delay`` consecutive SGD steps (an update's, a
    report's) is the actor's loss."""
    mu_t = jnp.tanh(actor_inputs(policy, target_params, batch["next_obs"]))
    a_t = smoothed_target_actions(rng, mu_t, config.target_noise, config.target_noise_clip)
    q_t = critic_values(policy, target_params, batch["next_obs"], a_t)
    y = jax.lax.stop_gradient(batch["rewards"] + batch["discounts"] * q_t.min(axis=0))
    q_tm1 = critic_values(policy, params, batch["obs"], batch["actions"])
    q_loss, td = critic_loss(q_tm1, y, batch["weights"])

    def pi_loss_of(actor_params: Any) -> Array:
        mu = jnp.tanh(actor_inputs(policy, actor_params, batch["obs"]))
        return -jnp.mean(first_critic(policy, jax.lax.stop_gradient(params), batch["obs"], mu))

    if step is None:
        pi_loss = pi_metric = pi_loss_of(params)
    else:
        actor_step = step % config.policy_delay == 0
        pi_loss = jax.lax.cond(actor_step, pi_loss_of, lambda _: jnp.zeros((), q_loss.dtype), params)
        pi_metric = pi_loss * config.policy_delay
    metrics = {"td_error": td, "critic_loss": q_loss, "actor_loss": pi_metric, "mean_q": jnp.mean(q_tm1)}
    return q_loss + pi_loss, metrics


def optimizer(config: TD3Config) -> Callable[..., optax.GradientTransformation]:
    """Adam for each part, the actor's stepping only every ``policy_delay`` SGD steps
    (:func:`~jaxflow.learn.every_k_steps`)."""

    def labels(params: Any) -> Any:
        return jax.tree_util.tree_map_with_path(lambda path, _: "actor" if ACTOR in str(path) else "critics", params)

    def factory(lr: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        actor = every_k_steps(make_optimizer(lr, max_grad_norm), config.policy_delay)
        return optax.multi_transform({"actor": actor, "critics": make_optimizer(lr, max_grad_norm)}, labels)

    return factory
