"""On-device training for JAX environments: rollout and update compiled into one function.

The Anakin architecture of Hessel et al. (2021), "Podracer architectures for scalable
Reinforcement Learning": when the environment is itself written in JAX (gymnax), acting,
stepping and learning all run on the accelerator. ``vmap`` over environments, ``lax.scan``
over time steps and over ``iterations_per_call`` training iterations make one compiled
call; the host sees only the metrics.

Nothing of an algorithm is written twice for this: its network, its worker-side
``postprocess`` (GAE, n-step targets) and its ``loss`` with the learner's
:func:`~jaxflow.learner.sgd_update` run here as they are; an algorithm opts in by
registering a :class:`DeviceSpec` that says how it acts and what batch its loss takes.

Independent agents are one more batch axis: ``num_seeds`` seeds times the values of a
``sweep`` over one numeric config field are "members" of one compiled call, ``vmap``-ed on
accelerators (see :meth:`DeviceProgram._run_members`).
On several local devices the environments are sharded along their batch axis and
everything else is replicated, so XLA averages the gradients across devices and the
update equals the single-device update on the same batch.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import envs
from jaxflow import device_replay
from jaxflow.config import ConfigError
from jaxflow.evaluation import evaluate_policy
from jaxflow.iterators import LocalIterator, from_iterator
from jaxflow.learner import TrainState, copy_to_target, make_optimizer, sgd_step, sgd_update
from jaxflow.metrics import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES, Context
from jaxflow.operators import ReportMetrics
from jaxflow.workers import flatten_time_major

Array = jax.Array


def sample_action(key: Array, logits: Array, env_steps: Array, config: Any) -> tuple[Array, Array]:
    """``a ~ softmax(logits)`` per row and ``log p(a)``: the Ray workers' sampler, drawn with
    JAX's PRNG on the device."""
    del env_steps, config
    actions = jax.random.categorical(key, logits).astype(jnp.int32)
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], axis=-1)[:, 0]
    return actions, logp


def flat_batch(traj: Mapping[str, Array], config: Any) -> dict[str, Array]:
    """The learner's batch of an on-policy fragment: every ``[T, B, ...]`` field as ``[T * B, ...]``."""
    del config
    return flatten_time_major(dict(traj))


@dataclasses.dataclass(frozen=True)
class DeviceReplay:
    """How a replay algorithm trains on the device, made from its (possibly swept) config:
    after each rollout the fragment's transitions enter an on-device prioritized buffer
    (see :mod:`jaxflow.device_replay`), then ``sgd_steps`` replayed batches are trained on."""

    capacity: int
    batch_size: int
    sgd_steps: int
    alpha: Any
    beta: Callable[[Array], Array]
    """Importance-sampling exponent as a function of the SGD step."""
    priority_eps: Any
    target_period: int
    """SGD steps between copies of the parameters into the target network."""
    learning_starts: int
    """Transitions in the buffer before training starts."""


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """What an algorithm registers to train on the device (its network, ``postprocess`` and
    ``loss`` come from its :class:`~jaxflow.algorithm.AlgorithmSpec`).

    ``act(key, logits, env_steps, config) -> (actions, logp)`` picks actions from the
    network's first output (default: sample the softmax; DQN: epsilon-greedy);
    ``prepare(traj, config) -> batch`` makes the loss's batch from a postprocessed fragment
    (default: flat ``[T * B]``); ``replay(config) -> DeviceReplay`` trains from an on-device
    replay buffer instead of on the fresh batch (``prepare`` then returns transitions with a
    ``priorities`` field).
    """

    act: Callable[..., tuple[Array, Array]] = sample_action
    prepare: Callable[..., dict[str, Array]] = flat_batch
    replay: Callable[[Any], DeviceReplay] | None = None


class EnvCarry(NamedTuple):
    """The environments between two steps: ``[B, ...]`` states, observations, running episodes."""

    env_state: Any
    obs: Array
    episode_return: Array
    episode_length: Array


class AnakinState(NamedTuple):
    """Everything a member needs to continue, bit for bit: saved and restored as one pytree."""

    train: TrainState
    envs: EnvCarry
    key: Array
    iteration: Array
    """Training iterations done (int32 scalar)."""
    hyper: dict[str, Array]
    """The member's values of the swept config field ({} without a sweep)."""
    replay: Any = None


class Member(NamedTuple):
    """One independent agent of a device-mode run."""

    name: str
    seed: int
    hyper: dict[str, float]


def members(config: Any) -> list[Member]:
    """The agents a config trains: each value of ``sweep`` (at most one field) times
    ``num_seeds`` seeds ``seed, seed + 1, ...``, sweep-major."""
    field, values = next(iter(config.sweep.items())) if config.sweep else (None, [None])
    out = []
    for value in values:
        for i in range(config.num_seeds):
            seed = config.seed + i
            hyper = {} if field is None else {field: float(value)}
            out.append(Member(f"seed={seed}" + ("" if field is None else f",{field}={value:g}"), seed, hyper))
    return out


def with_hyper(config: Any, hyper: Mapping[str, Array]) -> Any:
    """A copy of ``config`` whose swept fields hold the member's (traced) values.

    The copy skips validation on purpose: the values are tracers inside the compiled
    function, and every one of them was validated as a number when the run was configured.
    """
    if not hyper:
        return config
    traced = copy.copy(config)
    for k, v in hyper.items():
        object.__setattr__(traced, k, v)
    return traced


def step_envs(env: Any, env_params: Any, keys: Array, env_state: Any, actions: Array) -> tuple[Array, Any, Array, Array, Array, Array]:
    """One step of B gymnax environments with gymnax's automatic reset.

    Returns ``(obs, env_state, reward, terminated, truncated, final_obs)``: the next
    observation is a fresh episode's where one ended, ``final_obs`` the ended episode's last
    one. An episode that terminates on its time limit counts as terminated (no bootstrap).
    """
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys, env_state, actions, env_params
    )
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.asarray(truncated, bool) & ~terminated
    return obs, env_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info["final_observation"]


def rollout(env: Any, env_params: Any, apply_fn: Any, act: Callable[..., Any], config: Any, params: Any,
            carry: EnvCarry, key: Array, env_steps: Array, num_steps: int) -> tuple[EnvCarry, dict[str, Array], tuple[Array, Array]]:
    """``num_steps`` steps of every environment with the policy ``apply_fn(params, .)``.

    The fragment has the fields and conventions of ``RolloutWorker.sample`` (time-major
    ``[T, B]``; a truncated episode's last reward has ``gamma * V(final_obs)`` added and its
    discount is 0), so an algorithm's ``postprocess`` takes it unchanged. Also returns the
    returns and lengths of the episodes that ended, ``[T, B]``, NaN and 0 elsewhere.
    """
    num_envs = carry.obs.shape[0]
    # An episode lasts at most max_steps_in_episode steps, so in a fragment no longer than that an
    # environment truncates at most once: remember where, and bootstrap them all with one forward
    # pass after the scan. (A per-step lax.cond would run the pass on every step once vmapped.)
    once = num_steps <= int(env_params.max_steps_in_episode)

    def step(inner: tuple[EnvCarry, Array, Array], inputs: tuple[Array, Array]):
        c, truncated_obs, truncated_at = inner
        t, key = inputs
        k_act, k_env = jax.random.split(key)
        logits, values = apply_fn(params, c.obs)
        actions, logp = act(k_act, logits, env_steps + t * num_envs, config)
        obs, env_state, reward, terminated, truncated, final_obs = step_envs(
            env, env_params, jax.random.split(k_env, num_envs), c.env_state, actions
        )
        if once:
            rewards = reward
            truncated_obs = jnp.where(truncated.reshape((-1,) + (1,) * (obs.ndim - 1)), final_obs, truncated_obs)
            truncated_at = jnp.where(truncated, t, truncated_at)
        else:
            rewards = reward + jax.lax.cond(
                truncated.any(),
                lambda: jnp.where(truncated, config.gamma * apply_fn(params, final_obs)[1], 0.0),
                lambda: jnp.zeros_like(reward),
            )
        done = terminated | truncated
        episode_return, episode_length = c.episode_return + reward, c.episode_length + 1
        out = dict(obs=c.obs, actions=actions, logp=logp, logits=logits, values=values, rewards=rewards,
                   discounts=jnp.where(done, 0.0, config.gamma).astype(jnp.float32))
        ended = (jnp.where(done, episode_return, jnp.nan), jnp.where(done, episode_length, 0))
        c = EnvCarry(env_state, obs, jnp.where(done, 0.0, episode_return), jnp.where(done, 0, episode_length))
        return (c, truncated_obs, truncated_at), (out, ended)

    inner = (carry, jnp.zeros_like(carry.obs), jnp.full((num_envs,), -1, jnp.int32)) if once else (carry, None, None)
    (carry, truncated_obs, truncated_at), (traj, ended) = jax.lax.scan(
        step, inner, (jnp.arange(num_steps), jax.random.split(key, num_steps))
    )
    if once:
        bootstrap = jnp.where(truncated_at >= 0, config.gamma * apply_fn(params, truncated_obs)[1], 0.0)
        traj["rewards"] = traj["rewards"].at[jnp.maximum(truncated_at, 0), jnp.arange(num_envs)].add(bootstrap)
    traj["bootstrap_value"] = apply_fn(params, carry.obs)[1]
    traj["last_obs"] = carry.obs
    return carry, traj, ended


def replay_update(loss_fn: Any, optimizer: optax.GradientTransformation, rs: DeviceReplay, train: TrainState,
                  replay: device_replay.DeviceReplayState, transitions: Mapping[str, Array], key: Array):
    """Adds a fragment's transitions to the buffer, then (once it holds ``learning_starts``)
    trains on ``rs.sgd_steps`` replayed batches: importance-weighted loss, new priorities
    ``|TD error| + eps``, and the target network refreshed every ``target_period`` steps.
    Returns ``(train, replay, scalar metrics, samples trained)``."""
    items = dict(transitions)
    replay = device_replay.add(replay, items, items.pop("priorities"), rs.alpha)

    def sgd(carry, key):
        train, replay = carry
        batch, slots, weights = device_replay.sample(replay, key, rs.batch_size, rs.beta(train.step))
        train, metrics = sgd_step(loss_fn, optimizer, train, dict(batch, weights=weights))
        replay = device_replay.update_priorities(replay, slots, jnp.abs(metrics.pop("td_error")) + rs.priority_eps, rs.alpha)
        train = jax.lax.cond(train.step % rs.target_period == 0, copy_to_target, lambda s: s, train)
        return (train, replay), metrics

    def learn(carry):
        (train, replay), metrics = jax.lax.scan(sgd, carry, jax.random.split(key, rs.sgd_steps))
        return train, replay, jax.tree.map(jnp.mean, metrics), jnp.float32(rs.sgd_steps * rs.batch_size)

    def wait(carry):
        shapes = jax.eval_shape(learn, carry)[2]
        return carry[0], carry[1], jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes), jnp.float32(0)

    return jax.lax.cond(replay.size >= rs.learning_starts, learn, wait, (train, replay))


def _device_optimizer(lr: Any, max_grad_norm: Any) -> optax.GradientTransformation:
    # The learning rate and clipping norm live in the optimizer state, so that they can
    # differ between the vmapped members of a sweep.
    return optax.inject_hyperparams(make_optimizer)(lr=lr, max_grad_norm=max_grad_norm)


class DeviceProgram:
    """An algorithm compiled for on-device training: the state of every member (on the
    local devices) and one jitted, state-donating call of ``iterations_per_call`` iterations.

    Example:
        >>> program = DeviceProgram(PPOConfig(env="gymnax/CartPole-v1"), get_algorithm("PPO"))  # doctest: +SKIP
        >>> out = program.call()       # host metrics of K iterations                         # doctest: +SKIP
    """

    def __init__(self, config: Any, spec: Any):
        if spec.device is None:
            raise ConfigError(f"{spec.name} has no on-device mode; use mode='ray'.")
        self.config, self.spec, self.device = config, spec, spec.device
        self.env, self.env_params = envs.make(config.env, **config.env_config)
        obs_shape = tuple(self.env.observation_space(self.env_params).shape)
        self.num_actions = int(self.env.num_actions)
        self.network = spec.network(config, obs_shape, self.num_actions)
        self.num_envs = config.num_envs or max(1, config.num_workers) * config.num_envs_per_worker
        self.steps_per_iteration = self.num_envs * config.rollout_fragment_length
        self.devices = jax.local_devices()
        if self.num_envs % len(self.devices):
            raise ConfigError(
                f"{type(config).__name__}.num_envs ({self.num_envs}) must be divisible by the {len(self.devices)} local devices."
            )
        self.members = members(config)
        self._optimizer = _device_optimizer(config.lr, config.max_grad_norm)
        mesh = Mesh(np.asarray(self.devices), ("batch",))
        self._replicated = NamedSharding(mesh, PartitionSpec())
        self._env_sharded = NamedSharding(mesh, PartitionSpec("batch"))
        state = self._init_members()
        self._check(state, obs_shape)
        self._shardings = self._state_shardings(state)
        self.state = jax.device_put(state, self._shardings, may_alias=False)
        self._run = jax.jit(self._run_members, donate_argnums=0)

    @property
    def loss(self) -> Callable[..., Any]:
        """The algorithm's loss, the very function Ray mode's learner uses."""
        return self.spec.loss

    # --- state ------------------------------------------------------------------------

    def _init_members(self) -> AnakinState:
        """Every member's state stacked along a leading members axis. Each member is initialised
        by the same compiled function, one at a time, so its parameters do not depend on the
        number of members."""
        init = jax.jit(self._init_one)
        states = [init(jnp.int32(m.seed), {k: jnp.float32(v) for k, v in m.hyper.items()}) for m in self.members]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *states)

    def _init_one(self, seed: Array, hyper: dict[str, Array]) -> AnakinState:
        cfg = with_hyper(self.config, hyper)
        key = jax.random.PRNGKey(seed)
        # As the Ray-mode learner does: parameters and learner RNG from PRNGKey(seed).
        params = self.network.init(key, jnp.zeros((1,) + self.env.observation_space(self.env_params).shape, jnp.float32))
        optimizer = _device_optimizer(cfg.lr, cfg.max_grad_norm)
        train = TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), key)
        if self.device.replay is not None:
            train = copy_to_target(train)
        key, k_reset = jax.random.split(jax.random.fold_in(key, 1))
        obs, env_state = jax.vmap(self.env.reset_env, in_axes=(0, None))(jax.random.split(k_reset, self.num_envs), self.env_params)
        carry = EnvCarry(env_state, obs, jnp.zeros(self.num_envs, jnp.float32), jnp.zeros(self.num_envs, jnp.int32))
        replay = None
        if self.device.replay is not None:
            example = jax.eval_shape(self._learner_batch, params, carry, key)
            replay = device_replay.init(
                {k: jnp.zeros(v.shape[1:], v.dtype) for k, v in example.items() if k != "priorities"},
                self.device.replay(self.config).capacity,
            )
        return AnakinState(train, carry, key, jnp.zeros((), jnp.int32), dict(hyper), replay)

    def _check(self, state: AnakinState, obs_shape: tuple[int, ...]) -> None:
        # A JAX env's shapes are static: a mismatch is found here, before anything runs.
        got = state.envs.obs.shape[-len(obs_shape):] if obs_shape else ()
        if tuple(got) != obs_shape:
            raise envs.EnvSpaceError(
                f"{self.config.env}: reset returned observations of shape {tuple(got)}, "
                f"but its observation space is {obs_shape}."
            )
        try:
            jax.eval_shape(self._run_members, state)
        except ValueError as e:  # e.g. a minibatch larger than the batch
            raise ConfigError(
                f"{type(self.config).__name__}: {e}; in device mode a training batch is num_envs ({self.num_envs}) x "
                f"rollout_fragment_length ({self.config.rollout_fragment_length}) env steps."
            ) from e
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                jax.errors.TracerIntegerConversionError) as e:
            if not self.config.sweep:
                raise
            raise ConfigError(
                f"sweep over {next(iter(self.config.sweep))!r}: that field decides shapes or Python control flow, "
                "so it cannot vary inside one compiled function; sweep a numeric field such as lr, "
                "gamma or ent_coef."
            ) from e

    def _state_shardings(self, state: AnakinState) -> Any:
        env_sharding = NamedSharding(self._env_sharded.mesh, PartitionSpec(None, "batch"))
        return state._replace(
            **{f: jax.tree.map(lambda _: self._replicated, getattr(state, f)) for f in AnakinState._fields if f != "envs"},
            envs=jax.tree.map(lambda _: env_sharding, state.envs),
        )

    def get_state(self) -> AnakinState:
        """The whole state on the host (for checkpoints)."""
        return jax.device_get(self.state)

    def set_state(self, state: AnakinState) -> None:
        self.state = jax.device_put(state, self._shardings, may_alias=False)

    def get_weights(self, member: int = 0) -> Any:
        """One member's parameters as numpy arrays."""
        return jax.tree.map(lambda x: np.asarray(x[member]), jax.device_get(self.state.train.params))

    # --- the compiled call -------------------------------------------------------------

    def _learner_batch(self, params: Any, carry: EnvCarry, key: Array) -> dict[str, Array]:
        """The learner batch of one rollout from ``carry`` (traced for shapes only at init)."""
        cfg = self.config
        _, traj, _ = rollout(self.env, self.env_params, self.network.apply, self.device.act, cfg, params, carry, key,
                             jnp.float32(0), cfg.rollout_fragment_length)
        if self.spec.postprocess is not None:
            traj = self.spec.postprocess(traj, cfg)
        return self.device.prepare(traj, cfg)

    def _run_members(self, state: AnakinState) -> tuple[AnakinState, dict[str, Array]]:
        """Every member's ``iterations_per_call`` iterations, on the leading members axis.

        One member runs unbatched. Several run ``vmap``-ed on accelerators, where batching
        agents fills the device, and one after another (``lax.map``) on CPUs, where it was
        measured faster for small networks and, running each member's unbatched arithmetic,
        reproduces every seed's single run bit for bit (``member_batching`` overrides this).
        """
        if len(self.members) == 1:
            state, out = self._run_one(jax.tree.map(lambda x: x[0], state))
            return jax.tree.map(lambda x: x[None], (state, out))
        batching = self.config.member_batching
        if batching == "auto":
            batching = "map" if jax.default_backend() == "cpu" else "vmap"
        return jax.vmap(self._run_one)(state) if batching == "vmap" else jax.lax.map(self._run_one, state)

    def _run_one(self, state: AnakinState) -> tuple[AnakinState, dict[str, Array]]:
        cfg = with_hyper(self.config, state.hyper)
        loss_fn = functools.partial(self.spec.loss, apply_fn=self.network.apply, config=cfg)
        replay_settings = self.device.replay(cfg) if self.device.replay is not None else None
        num_epochs, minibatch_size = self.spec.sgd(cfg)
        inside = functools.partial(jax.lax.with_sharding_constraint, shardings=self._env_sharded)

        def iteration(state: AnakinState, _: Any):
            key, k_rollout, k_train = jax.random.split(state.key, 3)
            env_steps = state.iteration.astype(jnp.float32) * self.steps_per_iteration
            carry, traj, (returns, lengths) = rollout(
                self.env, self.env_params, self.network.apply, self.device.act, cfg, state.train.params, state.envs,
                k_rollout, env_steps, cfg.rollout_fragment_length,
            )
            if self.spec.postprocess is not None:
                traj = self.spec.postprocess(traj, cfg)
            batch = self.device.prepare(traj, cfg)
            if replay_settings is None:
                train, metrics = sgd_update(loss_fn, self._optimizer, num_epochs, minibatch_size, state.train, batch)
                replay, trained = None, jnp.float32(self.steps_per_iteration)
            else:
                train, replay, metrics, trained = replay_update(
                    loss_fn, self._optimizer, replay_settings, state.train, state.replay, batch, k_train
                )
            state = AnakinState(train, jax.tree.map(inside, carry), key, state.iteration + 1, state.hyper, replay)
            metrics = {k: v for k, v in metrics.items() if v.ndim == 0}
            return state, dict(metrics, episode_returns=returns, episode_lengths=lengths, trained=trained)

        return jax.lax.scan(iteration, state, None, length=self.config.iterations_per_call)

    def results(self) -> LocalIterator[dict[str, Any]]:
        """The run's results: (1) ``iterations_per_call`` rollouts + updates per compiled call,
        (2) one result per training iteration."""
        return ReportMetrics(OnDevice(self), None, self.config.min_env_steps_per_iteration)

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Member ``member``'s greedy policy for ``episodes`` episodes (stepped on the host)."""
        return evaluate_policy(self.config, self.network, self.get_weights(member), episodes, seed)

    def stop(self) -> None:
        """Nothing runs between calls: no threads or actors to stop."""

    def call(self) -> dict[str, np.ndarray]:
        """Runs ``iterations_per_call`` iterations of every member; returns their metrics
        on the host, ``[members, K, ...]``."""
        self.state, out = self._run(self.state)
        return jax.device_get(out)


def OnDevice(program: DeviceProgram) -> LocalIterator[dict[str, np.ndarray]]:
    """The source of a device-mode plan: each item is one compiled call of
    ``iterations_per_call`` iterations of every member, recorded in the plan's metrics
    (env steps sampled and trained, updates, episodes per member, mean learner statistics).

    Example:
        >>> results = ReportMetrics(OnDevice(program), None)  # doctest: +SKIP
    """
    config = program.config
    names = [m.name for m in program.members] if len(program.members) > 1 else []
    ctx = Context(num_episodes=config.metrics_num_episodes, member_names=names)

    def gen() -> Iterator[dict[str, np.ndarray]]:
        while True:
            out = program.call()
            for i in range(len(program.members)):
                returns, lengths = out["episode_returns"][i].reshape(-1), out["episode_lengths"][i].reshape(-1)
                ended = ~np.isnan(returns)
                ctx.record_episodes(returns[ended], lengths[ended], member=i if names else None)
            trained = out["trained"][0]  # members train in lockstep
            ctx.counters[ENV_STEPS_SAMPLED] += len(trained) * program.steps_per_iteration
            ctx.counters[ENV_STEPS_TRAINED] += int(trained.sum())
            ctx.counters[NUM_UPDATES] += int(np.count_nonzero(trained))
            # The last iteration's statistics, averaged over members (NaN before a replay learner starts).
            last = {k: v[:, -1] for k, v in out.items() if k not in ("episode_returns", "episode_lengths", "trained")}
            ctx.info["learner"] = {k: float(np.mean(v)) for k, v in last.items()}
            yield out

    return from_iterator(gen, ctx, "OnDevice")
