"""On-device training for JAX environments: rollout and update compiled into one function.

The Anakin architecture of Hessel et al. (2021), "Podracer architectures for scalable
Reinforcement Learning": when the environment is itself written in JAX (gymnax, brax), acting,
stepping and learning all run on the accelerator. ``vmap`` over environments, ``lax.scan``
over time steps and over ``iterations_per_call`` training iterations make one compiled
call; the host sees only the metrics.

Nothing of an algorithm is written twice for this: its network, its worker-side
``postprocess`` (GAE, n-step targets) and its ``loss`` with the learner's
:func:`~jaxflow.learn.sgd.sgd_update` run here as they are; an algorithm opts in by
registering a :class:`DeviceSpec` that says how it acts and what batch its loss takes.

Independent agents are one more batch axis: ``num_seeds`` seeds times the values of a
``sweep`` over one numeric config field are "members" of one compiled call, ``vmap``-ed on
accelerators (see :meth:`DeviceProgram._run_members`).
On several local devices the environments are sharded along their batch axis and
everything else is replicated, so XLA averages the gradients across devices and the
update equals the single-device update on the same batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxflow import envs
from jaxflow.config.fields import ConfigError
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.envs.gymnax_cpu import to_gymnasium_space
from jaxflow.learn.learner import check_nonfinite
from jaxflow.learn.schedules import bind_loss, scheduled_optimizer
from jaxflow.learn.sgd import TrainState, sgd_update
from jaxflow.ondevice.evaluation import DeviceEvaluator
from jaxflow.ondevice.guards import check_env_values
from jaxflow.ondevice.members import members, with_hyper
from jaxflow.ondevice.pbt import PopulationBasedTraining, init_state, record
from jaxflow.ondevice.rollout import EnvCarry, first_nonfinite, initial_carry, rollout
from jaxflow.ondevice.source import OnDevice
from jaxflow.ondevice.spec import num_device_envs
from jaxflow.ondevice.state import AnakinState, state_shardings
from jaxflow.ondevice.update import replay_update
from jaxflow.ops.report import ReportMetrics
from jaxflow.rollout.episode_hooks import episode_hooks
from jaxflow.rollout.normalize import Normalizer

Array = jax.Array


class DeviceProgram:
    """An algorithm compiled for on-device training: the state of every member (on the
    local devices) and one jitted, state-donating call of ``iterations_per_call`` iterations.

    Example:
        >>> program = DeviceProgram(PPOConfig(env="gymnax/CartPole-v1"), get_algorithm("PPO"))  # doctest: +SKIP
        >>> out = program.call()       # host metrics of K iterations                         # doctest: +SKIP
    """

    def __init__(self, config: Any, spec: Any, callbacks: Sequence[Any] = ()):
        if spec.run.device is None:
            raise ConfigError(f"{spec.name} has no on-device mode; use mode='ray'.")
        self.config, self.spec, self.device = config, spec, spec.run.device
        self.episode_hooks = episode_hooks(callbacks)
        """The ``on_episode_end`` of ``callbacks``: called on the host after each call, once per ended episode."""
        self.env, self.env_params = envs.make(config.env, **config.env_config)
        obs_space = to_gymnasium_space(self.env.observation_space(self.env_params))
        action_space = to_gymnasium_space(self.env.action_space(self.env_params))
        obs_shape = tuple(obs_space.shape or ())
        self.policy = spec.policy(config, obs_space, action_space)
        self.evaluator = DeviceEvaluator(self.env, self.env_params, self.policy, config)
        self.num_envs = num_device_envs(config)
        self.steps_per_iteration = self.num_envs * config.rollout.rollout_fragment_length
        self.devices = jax.local_devices()
        if self.num_envs % len(self.devices):
            raise ConfigError(
                f"{type(config).__name__}.num_envs ({self.num_envs}) must be divisible by the {len(self.devices)} local devices."
            )
        self.members = members(config)
        self._make_optimizer = spec.learner.optimizer(config)
        self._optimizer = scheduled_optimizer(self._make_optimizer, config)
        mesh = Mesh(np.asarray(self.devices), ("batch",))
        self._env_sharded = NamedSharding(mesh, PartitionSpec("batch"))
        state = self._init_members()
        self._check(state, obs_shape)
        self._shardings = state_shardings(state, mesh)
        self.state = jax.device_put(state, self._shardings, may_alias=False)
        self.pbt = PopulationBasedTraining(config, self.members, self._shardings) if config.device.pbt else None
        self._run = jax.jit(self._run_members, donate_argnums=0)
        self.files = None  # everything is in the state
        self._results = ReportMetrics(
            OnDevice(self),
            None,
            config.min_env_steps_per_iteration,
            iterations_per_item=config.device.iterations_per_call,
        )

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
        # Strongly typed, as every call's output state is: a weakly typed leaf (gymnax's Pendulum
        # resets ``last_u`` to a Python 0.0) would make the second call compile the program again.
        state = jax.tree.map(lambda *xs: jax.lax.convert_element_type(jnp.stack(xs), xs[0].dtype), *states)
        return state._replace(pbt=init_state(len(self.members))) if self.config.device.pbt else state

    def _init_one(self, seed: Array, hyper: dict[str, Array]) -> AnakinState:
        cfg = with_hyper(self.config, hyper)
        key = jax.random.PRNGKey(seed)
        # As the Ray-mode learner does: parameters and learner RNG from PRNGKey(seed).
        params = self.policy.init(key)
        optimizer = scheduled_optimizer(self._make_optimizer, cfg)
        train = TrainState.create(params, optimizer, key, target_network=self.device.replay is not None)
        key, k_reset = jax.random.split(jax.random.fold_in(key, 1))
        carry = initial_carry(self.env, self.env_params, self.policy, cfg, self.num_envs, k_reset)
        replay = None
        if self.device.replay is not None:
            settings = self.device.replay(self.config)
            replay = settings.buffer.init(jax.eval_shape(self._learner_batch, params, carry, key), settings.capacity)
        return AnakinState(train, carry, key, jnp.zeros((), jnp.int32), dict(hyper), replay)

    def _check(self, state: AnakinState, obs_shape: tuple[int, ...]) -> None:
        # A JAX env's shapes are static: a mismatch is found here, before anything runs.
        got = state.envs.obs.shape[-len(obs_shape) :] if obs_shape else ()
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
                f"rollout_fragment_length ({self.config.rollout.rollout_fragment_length}) env steps."
            ) from e
        except (
            jax.errors.ConcretizationTypeError,
            jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError,
        ) as e:
            varied = [*self.config.device.sweep, *self.config.device.pbt]
            if not varied:
                raise
            raise ConfigError(
                f"sweep or pbt over {', '.join(map(repr, varied))}: one of them decides shapes or Python control flow, "
                "so it cannot vary inside one compiled function; vary numeric fields such as lr, "
                "gamma or ent_coef."
            ) from e

    def get_state(self) -> AnakinState:
        """The whole state on the host (for checkpoints)."""
        return jax.device_get(self.state)

    def set_state(self, state: AnakinState) -> None:
        self.state = jax.device_put(state, self._shardings, may_alias=False)

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint's ``meta.json`` records beyond the config and counters: under PBT,
        the best member and each member's recent return."""
        return {} if self.pbt is None else self.pbt.checkpoint_meta(self.state)

    def get_weights(self, member: int = 0) -> Any:
        """One member's parameters as numpy arrays."""
        return jax.tree.map(lambda x: np.asarray(x[member]), jax.device_get(self.state.train.params))

    # --- the compiled call -------------------------------------------------------------

    def _learner_batch(self, params: Any, carry: EnvCarry, key: Array) -> dict[str, Array]:
        """The learner batch of one rollout from ``carry`` (traced for shapes only at init)."""
        cfg = self.config
        _, traj, _ = rollout(
            self.env,
            self.env_params,
            self.policy,
            self.device.act,
            cfg,
            params,
            carry,
            key,
            jnp.float32(0),
            cfg.rollout.rollout_fragment_length,
        )
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
        batching = self.config.device.member_batching
        if batching == "auto":
            batching = "map" if jax.default_backend() == "cpu" else "vmap"
        return jax.vmap(self._run_one)(state) if batching == "vmap" else jax.lax.map(self._run_one, state)

    def _run_one(self, state: AnakinState) -> tuple[AnakinState, dict[str, Array]]:
        cfg = with_hyper(self.config, state.hyper)
        loss_fn = bind_loss(self.spec.loss, self.policy, cfg)
        replay_settings = self.device.replay(cfg) if self.device.replay is not None else None
        num_epochs, minibatch_size = self.spec.learner.sgd(cfg)
        inside = functools.partial(jax.lax.with_sharding_constraint, shardings=self._env_sharded)

        def iteration(state: AnakinState, _: Any):
            key, k_rollout, k_train = jax.random.split(state.key, 3)
            env_steps = state.iteration.astype(jnp.float32) * self.steps_per_iteration
            carry, traj, ended = rollout(
                self.env,
                self.env_params,
                self.policy,
                self.device.act,
                cfg,
                state.train.params,
                state.envs,
                k_rollout,
                env_steps,
                cfg.rollout.rollout_fragment_length,
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
            carry = jax.tree.map(inside, carry._replace(normalizer=None))._replace(normalizer=carry.normalizer)
            pbt = record(state.pbt, ended.returns)
            state = AnakinState(train, carry, key, state.iteration + 1, state.hyper, replay, pbt)
            metrics = {k: v for k, v in metrics.items() if v.ndim == 0}
            nonfinite_at, nonfinite_bits = first_nonfinite(ended.nonfinite)
            return state, dict(
                metrics,
                episode_returns=ended.returns,
                episode_lengths=ended.lengths,
                trained=trained,
                env_nonfinite_at=nonfinite_at,
                env_nonfinite_bits=nonfinite_bits,
            )

        return jax.lax.scan(iteration, state, None, length=self.config.device.iterations_per_call)

    def results(self) -> LocalIterator[dict[str, Any]]:
        """The run's results: (1) ``iterations_per_call`` rollouts + updates per compiled call,
        (2) one result per training iteration."""
        return self._results

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Member ``member``'s greedy policy for ``episodes`` episodes, all at once in one
        compiled call on the device, with its observation statistics where the run normalizes."""
        return self.evaluator(self.get_weights(member), self.get_normalizer(member), episodes, seed)

    def get_normalizer(self, member: int = 0) -> Normalizer | None:
        """One member's normalizer statistics as numpy arrays (None where the run normalizes nothing)."""
        return jax.tree.map(lambda x: np.asarray(x[member]), jax.device_get(self.state.envs.normalizer))

    def stop(self) -> None:
        """Nothing runs between calls: no threads or actors to stop."""

    def _last_iteration(self) -> int:
        """The iterations done so far (members train in lockstep)."""
        return int(np.max(jax.device_get(self.state.iteration)))

    def call(self) -> dict[str, np.ndarray]:
        """Runs ``iterations_per_call`` iterations of every member; returns their metrics
        on the host, ``[members, K, ...]``."""
        self.state, out = self._run(self.state)
        out = jax.device_get(out)
        if self.config.rollout.check_finite:
            check_env_values(out, self.config.env, self.num_envs, self.steps_per_iteration, self._last_iteration())
        skipped = out.get("nonfinite_step_fraction")
        if skipped is not None and np.any(skipped > 0):  # NaN where replay had not started
            where = f"iteration {self._last_iteration()} (device mode)"
            check_nonfinite(float(np.nanmax(skipped)), self.config.optimizer.on_nonfinite, where)
        if self.pbt is not None:
            self.state = self.pbt.step(self.state)
        return out
