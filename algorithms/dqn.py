"""DQN (Mnih et al., 2015, "Human-level control through deep reinforcement learning") with
double Q-learning (van Hasselt et al., 2016), dueling heads (Wang et al., 2016), n-step
returns computed on the rollout workers, and prioritized or uniform replay (Schaul et
al., 2016) in replay shards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, cast

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import rlax

from jaxflow import (
    AlgorithmSpec,
    BroadcastWeights,
    CommonConfig,
    Concurrently,
    DeviceReplay,
    DeviceSpec,
    ParallelReplay,
    ParallelRollouts,
    ReplayShards,
    ReportMetrics,
    StoreToReplay,
    TrainOneStep,
    UpdatePriorities,
    UpdateTargetNetwork,
    UpdateWorkerWeights,
    register_algorithm,
)
from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, UNIT, param, require
from jaxflow.ops.multiagent_ops import CountPolicyUpdates
from jaxflow.policies import Policy, q_policy
from jaxflow.replay.buffer import ReplayRows
from jaxflow.replay.transitions import encode_fragment

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class DQNConfig(CommonConfig):
    """DQN settings (plus :class:`~jaxflow.config.CommonConfig`)."""

    num_workers: int = param(1, NON_NEGATIVE)
    """Rollout workers (0 samples in the driver)."""
    num_envs_per_worker: int = param(8, POSITIVE)
    """Environments each worker steps together."""
    rollout_fragment_length: int = param(16, POSITIVE)
    """Time steps T each worker samples between two replay rounds."""
    lr: float = param(1e-3, POSITIVE)
    """Adam learning rate."""
    max_grad_norm: float = param(10.0, POSITIVE)
    """Gradient clipping by global norm."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the Q-network's hidden ReLU layers."""
    train_batch_size: int = param(64, POSITIVE)
    """Replayed transitions per SGD step."""
    samples_per_insert: float = param(8.0, POSITIVE)
    """Replay ratio: transitions replayed per transition sampled from the environments."""
    buffer_size: int = param(50_000, POSITIVE)
    """Transitions kept over all replay shards (the oldest are overwritten)."""
    learning_starts: int = param(1_000, NON_NEGATIVE)
    """Transitions per shard before replay starts."""
    num_replay_shards: int = param(1, POSITIVE)
    """Replay shard actors the buffer is split over."""
    n_step: int = param(3, POSITIVE)
    """Steps summed into each return before bootstrapping (1 is one-step Q-learning)."""
    double_q: bool = param(True)
    """Select the bootstrap action with the online network, evaluate it with the target."""
    dueling: bool = param(True)
    """Dueling value/advantage head."""
    target_network_update_freq: int = param(100, POSITIVE)
    """SGD steps between copies of the online parameters into the target network."""
    prioritized_replay: bool = param(True)
    """Sample in proportion to |TD error|^alpha (False: uniformly)."""
    prioritized_replay_alpha: float = param(0.6, NON_NEGATIVE)
    """Priority exponent alpha."""
    prioritized_replay_beta: float = param(0.4, UNIT)
    """Importance-sampling exponent at the start; annealed linearly to 1."""
    beta_annealing_steps: int = param(20_000, POSITIVE)
    """SGD steps over which beta reaches 1."""
    prioritized_replay_eps: float = param(1e-6, POSITIVE)
    """Added to |TD error| so every transition stays reachable."""
    epsilon_initial: float = param(1.0, UNIT)
    """Exploration rate at the start."""
    epsilon_final: float = param(0.02, UNIT)
    """Exploration rate after ``epsilon_timesteps``."""
    epsilon_timesteps: int = param(10_000, POSITIVE)
    """Env steps (over all workers) of the linear epsilon decay."""
    frame_stack: int = param(1, POSITIVE)
    """Frames stacked along each observation's first axis (4 for Atari); replay stores single frames."""
    max_weight_sync_delay: int = param(256, POSITIVE)
    """Env steps a worker samples between two fetches of the learner's weights."""
    huber_delta: float = param(1.0, POSITIVE)
    """Quadratic-to-linear switch point of the TD loss."""
    min_env_steps_per_iteration: int = param(2_000, NON_NEGATIVE)
    """Env steps sampled per reported training iteration."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.n_step < self.rollout_fragment_length or self.n_step == 1,
            f"n_step ({self.n_step}) must be smaller than rollout_fragment_length ({self.rollout_fragment_length}).",
        )
        require(
            self.buffer_size >= self.num_replay_shards * max(self.learning_starts, self.train_batch_size),
            f"buffer_size ({self.buffer_size}) must hold learning_starts ({self.learning_starts}) transitions per shard.",
        )


def n_step_targets(r_t: Array, discount_t: Array, n: int) -> tuple[Array, Array, Array]:
    """n-step returns of a time-major ``[T, B]`` fragment (Sutton & Barto, 2018, Section 7.1).

    ``discount_t`` is ``gamma`` or 0 where an episode ended. For each t, with
    ``k = min(n, T - t)``: ``G_t = sum_{i<k} (prod_{j<i} discount_{t+j}) r_{t+i}``, the
    bootstrap discount ``prod_{j<k} discount_{t+j}`` (0 once the episode ended) and ``k``,
    the offset of the observation to bootstrap from. Steps near the end of the fragment
    use fewer rewards, so no transition waits for the next fragment.
    """
    chex.assert_rank([r_t, discount_t], 2)
    chex.assert_equal_shape([r_t, discount_t])
    T = r_t.shape[0]
    t = jnp.arange(T)[:, None]
    g, acc = jnp.zeros_like(r_t), jnp.ones_like(discount_t)
    for i in range(n):
        valid = t + i < T
        r_i = jnp.roll(r_t, -i, axis=0)
        d_i = jnp.roll(discount_t, -i, axis=0)
        g = g + jnp.where(valid, acc * r_i, 0.0)
        acc = jnp.where(valid, acc * d_i, acc)
    k = jnp.broadcast_to(jnp.minimum(n, T - t), r_t.shape).astype(jnp.int32)
    return g, acc, k


def postprocess(traj: Mapping[str, Array], config: DQNConfig) -> dict[str, Array]:
    """Worker-side: n-step targets and initial priorities ``|TD error|`` computed with the
    worker's own Q-network (Horgan et al., 2018, Ape-X: new transitions enter the replay
    with a useful priority instead of the maximum). The observations pass through as they
    came (``obs [T]`` and ``last_obs``), so a rollout worker keeps them out of the compiled
    call (:class:`~jaxflow.rollout.postprocess.HostPostprocess`)."""
    g, discount, k = n_step_targets(traj["rewards"], traj["discounts"], config.n_step)
    max_q = jnp.concatenate([traj["values"], traj["bootstrap_value"][None]], axis=0)
    max_q_boot = jnp.take_along_axis(max_q, jnp.arange(g.shape[0])[:, None] + k, axis=0)
    q_taken = jnp.take_along_axis(traj["dist_inputs"], traj["actions"][..., None], axis=-1)[..., 0]
    td = g + discount * max_q_boot - q_taken
    return dict(
        obs=traj["obs"],
        last_obs=traj["last_obs"],
        actions=traj["actions"],
        rewards=g,
        discounts=discount,
        next_offsets=k,
        priorities=jnp.abs(td) + config.prioritized_replay_eps,
    )


def encode(traj: Mapping[str, np.ndarray], config: DQNConfig) -> ReplayRows:
    """Worker-side, on the host: packs the fragment into replay rows, each observation once."""
    obs = np.concatenate([traj["obs"], traj["last_obs"][None]])
    rows, priorities = encode_fragment(
        obs,
        traj["actions"],
        traj["rewards"],
        traj["discounts"],
        traj["next_offsets"],
        traj["priorities"],
        frame_stack=config.frame_stack,
    )
    return ReplayRows(rows, priorities, config.frame_stack)


def epsilon_schedule(config: DQNConfig) -> optax.Schedule:
    """Exploration rate as a function of env steps (all workers): linear over ``epsilon_timesteps``."""
    return optax.linear_schedule(config.epsilon_initial, config.epsilon_final, config.epsilon_timesteps)


def epsilon(config: DQNConfig, worker_index: int, env_steps: int) -> float:
    """The rate for a Ray worker, whose env steps of all workers are estimated as its own
    times the number of workers (they sample at about the same rate)."""
    return float(epsilon_schedule(config)(env_steps * max(1, config.num_workers)))


def epsilon_greedy(rng: np.random.Generator, q: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The greedy action, or with probability ``eps`` a uniformly random one, per row of ``q``."""
    explore = rng.random(q.shape[0]) < eps
    actions = np.where(explore, rng.integers(q.shape[-1], size=q.shape[0]), q.argmax(axis=-1))
    return actions.astype(np.int32), np.zeros(q.shape[0], np.float32)


def explore(
    rng: np.random.Generator, q: np.ndarray, config: DQNConfig, worker_index: int, env_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    return epsilon_greedy(rng, q, epsilon(config, worker_index, env_steps))


def explore_on_device(key: Array, q: Array, env_steps: Array, config: DQNConfig) -> tuple[Array, Array]:
    """Device mode's epsilon-greedy, with the exact env step count of the run."""
    k_explore, k_action = jax.random.split(key)
    explore = jax.random.uniform(k_explore, q.shape[:1]) < epsilon_schedule(config)(env_steps)
    random_actions = jax.random.randint(k_action, q.shape[:1], 0, q.shape[-1])
    return jnp.where(explore, random_actions, q.argmax(axis=-1)).astype(jnp.int32), jnp.zeros(q.shape[:1], jnp.float32)


def transitions(traj: Mapping[str, Array], config: DQNConfig) -> dict[str, Array]:
    """Device mode: the postprocessed fragment as flat transitions ``[T * B]``, each with its
    bootstrap observation (``next_offsets`` steps later) and its initial priority."""
    del config
    T, B = traj["actions"].shape
    obs = jnp.concatenate([traj["obs"], traj["last_obs"][None]])
    next_obs = obs[jnp.arange(T)[:, None] + traj["next_offsets"], jnp.arange(B)[None, :]]
    fields = dict(
        obs=traj["obs"],
        next_obs=next_obs,
        actions=traj["actions"],
        rewards=traj["rewards"],
        discounts=traj["discounts"],
        priorities=traj["priorities"],
    )
    return {k: v.reshape((T * B,) + v.shape[2:]) for k, v in fields.items()}


def replay_on_device(config: DQNConfig) -> DeviceReplay:
    """Device mode's replay: the Ray plan's buffer size, replay ratio, priorities and target period."""
    return DeviceReplay(
        capacity=config.buffer_size,
        batch_size=config.train_batch_size,
        sgd_steps=sgd_steps_per_fragment(config),
        alpha=config.prioritized_replay_alpha if config.prioritized_replay else 0.0,
        beta=importance_exponent(config),
        priority_eps=config.prioritized_replay_eps,
        target_period=config.target_network_update_freq,
        learning_starts=config.learning_starts,
    )


def td_errors(
    q_tm1: Array, a_tm1: Array, r_t: Array, discount_t: Array, q_t_value: Array, q_t_selector: Array, double_q: bool
) -> Array:
    """Per-transition TD errors ``[N]`` of (double) Q-learning with n-step returns ``r_t``
    and bootstrap discounts ``discount_t`` (van Hasselt et al., 2016, "Deep Reinforcement
    Learning with Double Q-learning"); targets carry no gradient."""
    chex.assert_rank([q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector], [2, 1, 1, 1, 2, 2])
    if double_q:
        return jax.vmap(rlax.double_q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    return jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t_value)


def loss(
    params: Any, batch: Mapping[str, Array], rng: Array, target_params: Any, *, policy: Policy, config: DQNConfig
) -> tuple[Array, dict[str, Array]]:
    """Importance-weighted Huber loss of the TD errors; the per-sample TD errors are
    returned as a metric, for the new replay priorities."""
    del rng

    def q(p: Any, obs: Array) -> Array:  # a Q-network: [B, A] values (apply without mutable state)
        return cast(Array, policy.network.apply(p, obs))

    q_tm1, q_t_value = q(params, batch["obs"]), q(target_params, batch["next_obs"])
    q_t_selector = q(params, batch["next_obs"]) if config.double_q else q_t_value
    td = td_errors(
        q_tm1, batch["actions"], batch["rewards"], batch["discounts"], q_t_value, q_t_selector, config.double_q
    )
    total = jnp.mean(batch["weights"] * rlax.huber_loss(td, config.huber_delta))
    return total, {"td_error": td, "mean_q": jnp.mean(q_tm1), "mean_abs_td_error": jnp.mean(jnp.abs(td))}


def make_replay(config: Any, samples_per_insert: float | None = None, error_buffer: float = 0.0) -> ReplayShards:
    """The replay shards, splitting ``buffer_size`` evenly; a rate limiter if ``samples_per_insert`` is set."""
    return ReplayShards(
        config.num_replay_shards,
        capacity=-(-config.buffer_size // config.num_replay_shards),
        alpha=config.prioritized_replay_alpha if config.prioritized_replay else 0.0,
        seed=config.seed,
        samples_per_insert=samples_per_insert,
        min_size_to_sample=max(1, config.learning_starts),
        error_buffer=error_buffer,
        on_failure="restart" if config.on_worker_failure == "restart" else "raise",
    )


def importance_exponent(config: Any) -> optax.Schedule:
    """beta as a function of SGD steps: ``prioritized_replay_beta`` annealed linearly to 1
    (0 without priorities: uniform replay needs no correction)."""
    return optax.linear_schedule(
        config.prioritized_replay_beta if config.prioritized_replay else 0.0,
        1.0 if config.prioritized_replay else 0.0,
        config.beta_annealing_steps,
    )


def beta_schedule(learner: Any, config: Any) -> Any:
    """Importance-sampling exponent at the learner's current SGD step."""
    beta = importance_exponent(config)
    return lambda: float(beta(learner.version))


def sgd_steps_per_fragment(config: DQNConfig) -> int:
    """SGD steps after each stored fragment, so that ``samples_per_insert`` holds on average."""
    fragment = config.num_envs_per_worker * config.rollout_fragment_length
    return max(1, round(fragment * config.samples_per_insert / config.train_batch_size))


def store_flow(rollouts, replay: ReplayShards, config: DQNConfig):
    """Fragments (n-step targets, priorities and rows made on the workers) into the replay."""
    return rollouts.for_each(StoreToReplay(replay, seed=config.seed, max_in_flight=4))


def train_flow(learner, replay: ReplayShards, config: DQNConfig, batches_per_output: int = 1):
    """Replayed batches, split into SGD steps; TD errors become priorities; the target lags."""
    batch = batches_per_output * sgd_steps_per_fragment(config) * config.train_batch_size
    return (
        ParallelReplay(replay, batch, beta=beta_schedule(learner, config), sample_wait_s=0.0)
        .for_each(TrainOneStep(learner))
        .for_each(UpdatePriorities(replay, config.prioritized_replay_eps, max_in_flight=4))
        .for_each(UpdateTargetNetwork(learner, config.target_network_update_freq))
    )


def plan(workers, learner, config: DQNConfig, replay: ReplayShards):
    # (1) workers sample asynchronously (one more fragment in flight while the driver trains) into
    #     the replay, and get fresh weights every few fragments
    store = store_flow(ParallelRollouts(workers, mode="async", num_async=2), replay, config).for_each(
        UpdateWorkerWeights(learner, workers, config.max_weight_sync_delay)
    )
    # (2) alternate storing a fragment and one replayed batch (a no-op until learning_starts)
    return ReportMetrics(
        Concurrently([store, train_flow(learner, replay, config)], mode="round_robin", output_indexes=[1]),
        workers,
        config.min_env_steps_per_iteration,
    )


def multiagent_flow(experiences, policy):
    """A DQN policy of a multi-agent run: each round's fragments are stored, then replayed at
    the configured ratio; the workers, sampling in lockstep, get its weights after each update."""
    fragments = policy.steps_per_round // (policy.config.num_envs_per_worker * policy.config.rollout_fragment_length)
    train = (
        train_flow(policy.learner, policy.replay, policy.config, fragments)
        .for_each(BroadcastWeights(policy.learner, policy.workers))
        .for_each(CountPolicyUpdates(policy.id, policy.learner))
    )
    return [(store_flow(experiences, policy.replay, policy.config), Fraction(1)), (train, Fraction(1))]


DQN = register_algorithm(
    AlgorithmSpec(
        "DQN",
        DQNConfig,
        loss,
        plan,
        postprocess,
        sgd=lambda c: (1, c.train_batch_size),
        policy=q_policy,
        target_network=True,
        replay=make_replay,
        explore=explore,
        encode=encode,
        device=DeviceSpec(act=explore_on_device, prepare=transitions, replay=replay_on_device),
        flow=multiagent_flow,
    )
)
