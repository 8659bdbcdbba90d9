"""Hand-written, fully-jitted PPO on gymnax CartPole-v1: the reference for
``benchmarks/device_mode.py``.

Written in the style popularised by PureJaxRL (Lu et al., 2022, "Discovered Policy
Optimisation"): the rollout (``lax.scan`` over time, ``vmap`` over envs), GAE and the
minibatch epochs all run inside one jitted function. It intentionally duplicates the
framework's PPO math and hyperparameters (network, init, optimizer, truncation
bootstrap, GAE, advantage standardization, loss), so the two can be compared on
equal work.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax

GAMMA, GAE_LAMBDA, CLIP_EPS, VF_COEF = 0.99, 0.95, 0.2, 0.5
MAX_GRAD_NORM = 0.5


@dataclasses.dataclass(frozen=True)
class Settings:
    """What differs between jaxflow's PPO defaults (the default here) and other settings."""

    lr: float = 1e-3
    anneal_updates: int | None = None
    """Iterations over which the learning rate falls linearly to 0, stepping once per
    iteration as PureJaxRL's ``linear_schedule`` does (None: constant)."""
    num_epochs: int = 8
    ent_coef: float = 0.0


JAXFLOW_PPO = Settings()
"""jaxflow's PPO defaults, which the reference runs unless told otherwise."""
PUREJAXRL_CARTPOLE = Settings(lr=2.5e-4, anneal_updates=500_000 // (4 * 128), num_epochs=4, ent_coef=0.01)
"""PureJaxRL's own CartPole-v1 settings (``purejaxrl/ppo.py``'s config: 4 envs x 128 steps,
4 epochs x 4 minibatches, lr 2.5e-4 annealed over 5e5 env steps, entropy 0.01), to be run with
``make_train(num_envs=4, num_steps=128, minibatch_size=128)``."""


class ActorCritic(nn.Module):
    """Separate tanh MLPs for policy logits and state value; layers are created in the same
    order as in ``jaxflow.networks.MLPActorCritic``, so equal seeds give equal initial weights."""

    num_actions: int
    hidden: tuple[int, ...] = (64, 64)

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        def mlp(x: jax.Array, out: int, head_gain: float) -> jax.Array:
            head = nn.Dense(out, kernel_init=nn.initializers.orthogonal(head_gain))  # named first, as there
            for width in self.hidden:
                x = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return head(x)

        return mlp(obs, self.num_actions, 0.01), mlp(obs, 1, 1.0)[..., 0]


def gae(
    values: jax.Array, rewards: jax.Array, discounts: jax.Array, last_value: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """GAE advantages and value targets of time-major ``[T, B]`` arrays; ``discounts``
    already hold gamma and are 0 where an episode ended."""

    def step(carry: tuple[jax.Array, jax.Array], x: tuple[jax.Array, ...]) -> tuple[Any, jax.Array]:
        (next_adv, next_value), (v, r, d) = carry, x
        adv = r + d * next_value - v + d * GAE_LAMBDA * next_adv
        return (adv, v), adv

    _, adv = jax.lax.scan(step, (jnp.zeros_like(last_value), last_value), (values, rewards, discounts), reverse=True)
    return adv, adv + values


def make_train(
    num_envs: int = 32,
    num_steps: int = 32,
    iterations_per_call: int = 10,
    seed: int = 0,
    minibatch_size: int = 256,
    settings: Settings = JAXFLOW_PPO,
) -> tuple[Callable[[], Any], Callable[[Any], tuple[Any, dict[str, jax.Array]]]]:
    """Returns ``(init_fn, train_fn)``: ``init_fn() -> runner_state`` (a pytree) and
    ``train_fn(runner_state) -> (runner_state, metrics)``, jit-compiled with the runner state
    donated, running ``iterations_per_call`` full PPO iterations (rollout + 8 epochs) via
    ``lax.scan``. ``metrics["episode_returns"]`` is ``[K, T, B]``: the return of each episode
    where it ended, NaN elsewhere. ``settings`` changes the learning rate (and its annealing),
    the epochs and the entropy bonus."""
    env, env_params = gymnax.make("CartPole-v1")
    network = ActorCritic(env.num_actions)
    apply = network.apply
    batch_size = num_envs * num_steps
    num_minibatches = batch_size // minibatch_size  # the remainder of each permutation is dropped
    lr: Any = settings.lr
    if settings.anneal_updates:
        steps_per_update, updates = num_minibatches * settings.num_epochs, settings.anneal_updates
        lr = lambda count: settings.lr * (1.0 - (count // steps_per_update) / updates)  # noqa: E731
    tx = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.adam(lr, eps=1e-5))
    assert num_minibatches > 0, f"num_envs * num_steps ({batch_size}) < minibatch size ({minibatch_size})"
    step_envs = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
    reset_envs = jax.vmap(env.reset_env, in_axes=(0, None))

    def init_fn() -> Any:
        params = network.init(jax.random.PRNGKey(seed), jnp.zeros((1, 4)))
        key, reset_key = jax.random.split(jax.random.PRNGKey(seed + 1))
        obs, env_state = reset_envs(jax.random.split(reset_key, num_envs), env_params)
        ep_ret, ep_len = jnp.zeros(num_envs), jnp.zeros(num_envs)  # two buffers: both are donated
        return params, tx.init(params), env_state, obs, ep_ret, ep_len, key

    def env_step(carry: Any, _: None) -> tuple[Any, tuple[Any, ...]]:
        params, env_state, obs, ep_ret, ep_len, key = carry
        key, act_key, step_key, reset_key = jax.random.split(key, 4)
        logits, value = apply(params, obs)
        action = jax.random.categorical(act_key, logits)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
        final_obs, final_state, reward, done, _ = step_envs(
            jax.random.split(step_key, num_envs), env_state, action, env_params
        )
        reset_obs, reset_state = reset_envs(jax.random.split(reset_key, num_envs), env_params)
        # gymnax >= 1.0 leaves the time limit out of step_env's done; older versions fold it
        # in. OR-ing it in gives the same done under both.
        truncated = final_state.time >= env_params.max_steps_in_episode
        done = done | truncated
        # A time limit is not a real ending: bootstrap from V(final obs) through the reward,
        # as the framework's rollout worker does, and only pay for that forward pass when needed.
        final_value = jax.lax.cond(truncated.any(), lambda: apply(params, final_obs)[1], lambda: jnp.zeros_like(value))
        train_reward = reward + GAMMA * final_value * truncated
        discount = GAMMA * (1.0 - done)  # done == terminated | truncated
        next_obs = jnp.where(done[:, None], reset_obs, final_obs)
        next_state = jax.tree.map(
            lambda r, s: jnp.where(done.reshape((-1,) + (1,) * (s.ndim - 1)), r, s), reset_state, final_state
        )
        ep_ret, ep_len = ep_ret + reward, ep_len + 1
        # Every ended episode's return (NaN elsewhere), so the host can keep a window of recent
        # episodes exactly as the framework does.
        stats = jnp.where(done, ep_ret, jnp.nan)
        ep_ret, ep_len = ep_ret * (1 - done), ep_len * (1 - done)
        transition = (obs, action, logp, value, train_reward, discount)
        return (params, next_state, next_obs, ep_ret, ep_len, key), (transition, stats)

    def loss_fn(params: Any, mb: tuple[jax.Array, ...]) -> jax.Array:
        obs, action, old_logp, adv, target = mb
        logits, v = apply(params, obs)
        log_probs = jax.nn.log_softmax(logits)
        ratio = jnp.exp(jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0] - old_logp)
        pg_loss = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * adv))
        value_loss = 0.5 * jnp.mean(jnp.square(v - target))
        entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
        return pg_loss + VF_COEF * value_loss - settings.ent_coef * entropy

    def sgd_step(carry: tuple[Any, Any], mb: tuple[jax.Array, ...]) -> tuple[tuple[Any, Any], None]:
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def iteration(runner_state: Any, _: None) -> tuple[Any, dict[str, jax.Array]]:
        params, opt_state, env_state, obs, ep_ret, ep_len, key = runner_state
        carry, (traj, stats) = jax.lax.scan(env_step, (params, env_state, obs, ep_ret, ep_len, key), None, num_steps)
        _, env_state, obs, ep_ret, ep_len, key = carry
        t_obs, t_action, t_logp, t_value, t_reward, t_discount = traj
        adv, targets = gae(t_value, t_reward, t_discount, apply(params, obs)[1])
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), (t_obs, t_action, t_logp, adv, targets))

        def epoch(carry: tuple[Any, Any, jax.Array], _: None) -> tuple[Any, None]:
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            idx = jax.random.permutation(perm_key, batch_size)[: num_minibatches * minibatch_size]
            mbs = jax.tree.map(lambda x: x[idx].reshape((num_minibatches, minibatch_size) + x.shape[1:]), batch)
            return (*jax.lax.scan(sgd_step, (params, opt_state), mbs)[0], key), None

        (params, opt_state, key), _ = jax.lax.scan(epoch, (params, opt_state, key), None, settings.num_epochs)
        return (params, opt_state, env_state, obs, ep_ret, ep_len, key), {"episode_returns": stats}

    def train(runner_state: Any) -> tuple[Any, dict[str, jax.Array]]:
        return jax.lax.scan(iteration, runner_state, None, iterations_per_call)

    return init_fn, jax.jit(train, donate_argnums=0)


def main(
    num_envs: int = 32,
    num_steps: int = 32,
    iterations_per_call: int = 10,
    seed: int = 0,
    target: float = 450.0,
    max_env_steps: int = 500_000,
) -> None:
    """Trains until the mean return of the last 100 episodes reaches ``target`` or
    ``max_env_steps``; the first call, which compiles, is left out of rates and times."""
    init_fn, train_fn = make_train(num_envs, num_steps, iterations_per_call, seed)
    runner_state = init_fn()
    steps_per_call = num_envs * num_steps * iterations_per_call
    window: collections.deque = collections.deque(maxlen=100)
    env_steps, t_start = 0, None
    while env_steps < max_env_steps:
        runner_state, metrics = train_fn(runner_state)
        returns = np.asarray(metrics["episode_returns"]).reshape(-1)  # also waits for the call
        window.extend(returns[~np.isnan(returns)].tolist())
        env_steps += steps_per_call
        if t_start is None:
            t_start, steps_at_start = time.perf_counter(), env_steps
            continue
        elapsed = time.perf_counter() - t_start
        mean_return = float(np.mean(window)) if window else float("nan")
        print(
            f"env_steps {env_steps:7d}  mean_return {mean_return:6.1f}  "
            f"steps/s {(env_steps - steps_at_start) / elapsed:9.0f}"
        )
        if mean_return >= target:
            print(f"reached {target} at {env_steps} env steps, {elapsed:.2f} s after compile")
            return
    print(f"target {target} not reached in {env_steps} env steps")


if __name__ == "__main__":
    main()
