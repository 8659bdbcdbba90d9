"""MAML's pure functions: episodes of a task on the device, the vanilla policy-gradient inner
loss, the inner adaptation step, the meta-objective differentiated through it, and a
meta-batch's collection and update (Finn, Abbeel & Levine, 2017, Section 3.2, Algorithm 3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import chex
import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from jaxflow.learn.sgd import TrainState, sgd_step

if TYPE_CHECKING:
    from jaxflow.envs.tasks import TaskDistribution

Array = jax.Array
Batch = Mapping[str, Array]


def rollout_episodes(
    env: Any, task: Any, apply_fn: Callable[..., Any], params: Any, key: Array, num_episodes: int, horizon: int
) -> dict[str, Array]:
    """``num_episodes`` episodes of one task from reset, ``horizon`` steps each, actions
    sampled from ``softmax(logits)``: time-major ``[T, B]`` ``obs``, ``actions``, ``rewards``
    and ``mask`` (1 while the episode runs, 0 after it terminated)."""
    k_reset, k_steps = jax.random.split(key)
    obs, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(k_reset, num_episodes), task)

    def step(carry, key):
        obs, state, alive = carry
        k_act, k_env = jax.random.split(key)
        logits, _ = apply_fn(params, obs)
        actions = jax.random.categorical(k_act, logits).astype(jnp.int32)
        # step_env: no automatic reset, so each row is one episode.
        next_obs, state, reward, terminated, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, num_episodes), state, actions, task
        )
        out = dict(
            obs=obs,
            actions=actions,
            rewards=jnp.where(alive, reward, 0.0).astype(jnp.float32),
            mask=alive.astype(jnp.float32),
        )
        return (next_obs, state, alive & ~terminated), out

    _, traj = jax.lax.scan(step, (obs, state, jnp.ones(num_episodes, bool)), jax.random.split(k_steps, horizon))
    return traj


def reward_to_go(r_t: Array, mask_t: Array, gamma: float) -> Array:
    """``G_t = r_t + gamma * G_{t+1}`` within each episode, ``[T, B]`` (finite horizon: no bootstrap)."""
    chex.assert_rank([r_t, mask_t], 2)
    chex.assert_equal_shape([r_t, mask_t])

    def back(g_tp1, inputs):
        r, m = inputs
        g_t = m * (r + gamma * g_tp1)
        return g_t, g_t

    return jax.lax.scan(back, jnp.zeros_like(r_t[0]), (r_t, mask_t), reverse=True)[1]


def pg_advantages(r_t: Array, mask_t: Array, gamma: float) -> Array:
    """Reward-to-go minus a time-dependent baseline (the mean reward-to-go at step t of the
    task's other episodes still running), scaled to unit standard deviation, ``[T, B]``.

    The baseline is leave-one-out so that it does not depend on the episode it is subtracted
    from (unbiased); the paper fits a linear feature baseline instead.
    """
    g_t = reward_to_go(r_t, mask_t, gamma)
    others = jnp.maximum(mask_t.sum(axis=1, keepdims=True) - mask_t, 1.0)
    b_t = ((g_t * mask_t).sum(axis=1, keepdims=True) - g_t * mask_t) / others
    adv_t = (g_t - b_t) * mask_t
    std = jnp.sqrt(jnp.sum(jnp.square(adv_t)) / jnp.maximum(mask_t.sum(), 1.0))
    return adv_t / (std + 1e-8)


def pg_batch(traj: Mapping[str, Array], gamma: float) -> dict[str, Array]:
    """The policy-gradient batch of one task's episodes: ``obs``, ``actions``, ``mask``,
    ``advantages`` ``[T, B]`` and each episode's (undiscounted) ``episode_return`` and
    ``episode_length`` ``[B]``."""
    return dict(
        obs=traj["obs"],
        actions=traj["actions"],
        mask=traj["mask"],
        advantages=pg_advantages(traj["rewards"], traj["mask"], gamma),
        episode_return=traj["rewards"].sum(axis=0),
        episode_length=traj["mask"].sum(axis=0),
    )


def inner_loss(params: Any, batch: Batch, apply_fn: Callable[..., Any]) -> Array:
    """Vanilla policy gradient (REINFORCE; Williams, 1992) on one task's episodes:
    ``-mean_t,b [log pi(a_t|s_t) A_t]`` over the steps that ran; ``[T, B]`` fields."""
    logits, _ = apply_fn(params, batch["obs"])
    logp_t = jnp.take_along_axis(jax.nn.log_softmax(logits), batch["actions"][..., None], axis=-1)[..., 0]
    chex.assert_equal_shape([logp_t, batch["advantages"], batch["mask"]])
    return -jnp.sum(batch["mask"] * logp_t * batch["advantages"]) / jnp.maximum(batch["mask"].sum(), 1.0)


def adapt(params: Any, batch: Batch, inner_lr: float | Array, apply_fn: Callable[..., Any], inner_steps: int) -> Any:
    """``theta'`` after ``inner_steps`` plain SGD steps ``theta <- theta - inner_lr * grad inner_loss``
    on one task's pre-adaptation episodes (every step reuses them: no resampling between steps)."""
    grad_fn = jax.grad(functools.partial(inner_loss, apply_fn=apply_fn))
    for _ in range(inner_steps):
        params = jax.tree.map(lambda p, g: p - inner_lr * g, params, grad_fn(params, batch))
    return params


def meta_loss(
    params: Any,
    pre_batch: Batch,
    post_batch: Batch,
    inner_lr: float | Array,
    apply_fn: Callable[..., Any],
    inner_steps: int,
) -> tuple[Array, dict[str, Array]]:
    """The MAML objective: the mean over tasks of ``inner_loss(adapt(params, pre_i), post_i)``;
    batches carry a leading task axis ``[N, T, B]``. Its gradient flows through the inner
    step(s) (second-order terms included).

    As in the paper, the pre-adaptation episodes are data: the dependence of their sampling
    distribution on ``params`` is ignored (its score-function term is dropped, cf. Rothfuss et
    al., 2019, "ProMP").
    """

    def one_task(pre: Batch, post: Batch):
        adapted = adapt(params, pre, inner_lr, apply_fn, inner_steps)
        logits, _ = apply_fn(params, pre["obs"])
        entropy_t = -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), axis=-1)
        step = optax.global_norm(jax.tree.map(jnp.subtract, adapted, params))
        return inner_loss(adapted, post, apply_fn), jnp.sum(entropy_t * pre["mask"]) / pre["mask"].sum(), step

    post_loss, entropy, step = jax.vmap(one_task)(pre_batch, post_batch)
    return jnp.mean(post_loss), {"entropy": jnp.mean(entropy), "inner_step_norm": jnp.mean(step)}


def loss(
    params: Any, batch: Mapping[str, Batch], rng: Array, *, apply_fn: Callable[..., Any], config: Any
) -> tuple[Array, dict[str, Array]]:
    """:func:`meta_loss` as a learner loss: ``batch = {"pre": ..., "post": ...}``."""
    del rng
    return meta_loss(params, batch["pre"], batch["post"], config.inner_lr, apply_fn, config.inner_steps)


def collect(
    dist: TaskDistribution, apply_fn: Callable[..., Any], config: Any, params: Any, key: Array, num_tasks: int
) -> dict[str, Any]:
    """One shard of a meta-batch: ``num_tasks`` tasks, their pre-adaptation episodes with
    ``params``, the inner step per task, the post-adaptation episodes with the adapted
    parameters. ``{"pre", "post"}`` are ``[N, T, B]`` batches, ``"tasks"`` the env params."""
    k_tasks, k_pre, k_post = jax.random.split(key, 3)
    tasks = dist.sample_tasks(k_tasks, num_tasks)

    def sample(task, theta, key):
        traj = rollout_episodes(dist.env, task, apply_fn, theta, key, config.episodes_per_task, dist.horizon)
        return pg_batch(traj, config.gamma)

    pre = jax.vmap(sample, in_axes=(0, None, 0))(tasks, params, jax.random.split(k_pre, num_tasks))
    adapted = jax.vmap(lambda b: adapt(params, b, config.inner_lr, apply_fn, config.inner_steps))(pre)
    post = jax.vmap(sample)(tasks, adapted, jax.random.split(k_post, num_tasks))
    return {"pre": pre, "post": post, "tasks": tasks}


def shard_key(key: ArrayLike, iteration: Array | int, shard: int) -> Array:
    """The key of shard ``shard`` of meta-iteration ``iteration`` (device mode is shard 0)."""
    return jax.random.fold_in(jax.random.fold_in(key, iteration), shard)


def meta_update(
    loss_fn: Callable[..., Any], optimizer: optax.GradientTransformation, train: TrainState, batch: Mapping[str, Any]
) -> tuple[TrainState, dict[str, Array]]:
    """One Adam step on the meta-loss of a collected meta-batch, with the batch's statistics."""
    train, metrics = sgd_step(loss_fn, optimizer, train, {"pre": batch["pre"], "post": batch["post"]})
    pre, post = batch["pre"], batch["post"]
    return train, dict(
        metrics,
        pre_adaptation_return=jnp.mean(pre["episode_return"]),
        post_adaptation_return=jnp.mean(post["episode_return"]),
        episode_returns=post["episode_return"].reshape(-1),
        episode_lengths=post["episode_length"].reshape(-1),
        env_steps=pre["mask"].sum() + post["mask"].sum(),
    )


def evaluate_adaptation(collect_fn: Callable[..., Any], params: Any, key: Array, num_tasks: int) -> dict[str, Any]:
    """Mean return on ``num_tasks`` tasks drawn from ``key`` before adaptation and after the
    inner step(s), ``episodes_per_task`` sampled episodes each (the stochastic policy, as
    adaptation needs its exploration); ``return_mean``/``return_std`` are the adapted
    policy's, over tasks. ``collect_fn(params, key, num_tasks=n)`` is :func:`collect` with its
    task distribution, network and config bound (e.g. ``MAMLProgram.collect``)."""
    batch = jax.device_get(collect_fn(params, key, num_tasks=num_tasks))
    pre, post = batch["pre"]["episode_return"].mean(axis=1), batch["post"]["episode_return"].mean(axis=1)
    return {
        "tasks": num_tasks,
        "episodes": int(batch["post"]["episode_return"].size),
        "pre_adaptation_return": float(pre.mean()),
        "post_adaptation_return": float(post.mean()),
        "adaptation_gain": float(post.mean() - pre.mean()),
        "return_mean": float(post.mean()),
        "return_std": float(post.std()),
        "returns": post.tolist(),
    }


def collect_jit(dist: TaskDistribution, apply_fn: Callable[..., Any], config: Any) -> Callable[..., Any]:
    """:func:`collect` for one task distribution, network and config, compiled per ``num_tasks``."""
    return jax.jit(functools.partial(collect, dist, apply_fn, config), static_argnames="num_tasks")
