"""An algorithm run as an object: build from a name or a config, ``train()``, ``save``,
``restore``, ``evaluate``, ``stop`` -- the Python API the CLI is written on.

Algorithms register an :class:`AlgorithmSpec` (config class, pure loss, optional
worker-side postprocessing, plan); jaxflow looks them up by name and never
imports them directly, so the dependency still points from ``algorithms`` to
``jaxflow``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import functools
import importlib
import logging
import os
from typing import Any, Callable

import gymnasium
import jax
import jax.numpy as jnp

import envs
from jaxflow import checkpoint
from jaxflow.anakin import DeviceProgram, DeviceSpec
from jaxflow.config import CommonConfig, ConfigError, from_json_dict, to_json_dict
from jaxflow.evaluation import evaluate_policy
from jaxflow.learner import Learner, make_optimizer
from jaxflow.metrics import Context
from jaxflow.networks import actor_critic_network
from jaxflow.replay_shards import ReplayShards
from jaxflow.workers import WorkerSet, WorkerSpec, example_train_batch

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm page registers.

    ``loss(params, batch, rng, *, apply_fn, config) -> (loss, metrics)`` on a flat batch;
    ``postprocess(traj, config) -> traj`` runs on the rollout workers (e.g. GAE) and returns a
    flat dict; fields it returns unchanged are not copied there, so it should pass the
    observations through as they came (see :class:`~jaxflow.workers.HostPostprocess`);
    ``plan(workers, learner, config)`` returns the iterator of training results;
    ``sgd(config) -> (num_epochs, minibatch_size)`` shapes the learner's update;
    ``gradients_on_workers`` gives the workers the loss (A3C);
    ``network(config, obs_shape, num_actions)`` builds the flax module (default: an actor-critic,
    convolutional for image observations, see :func:`~jaxflow.networks.actor_critic_network`);
    ``target_network`` gives the learner a target copy of the parameters (DQN);
    ``replay(config)`` builds the replay shards, which the plan then gets as a fourth
    argument and which are checkpointed with the learner;
    ``explore`` and ``encode`` go to the rollout workers (see :class:`WorkerSpec`);
    ``device`` lets the algorithm train on the device with a JAX environment (see
    :class:`~jaxflow.anakin.DeviceSpec`); ``program(config, spec, mode)`` builds the whole
    run instead of workers + learner + plan, for an algorithm whose loop is not "sample,
    then update" (MAML's inner and outer loops): an object like
    :class:`~jaxflow.anakin.DeviceProgram` with ``network``, ``results()``, ``get_state()``,
    ``set_state()``, ``evaluate(episodes, seed)`` and ``stop()``; ``flow(experiences,
    policy)`` trains one policy of a multi-agent run from a stream of its own fragments
    (see :mod:`jaxflow.multiagent`): its sub-flows, each with its outputs per round of sampling.
    """

    name: str
    config_cls: type
    loss: Callable[..., Any]
    plan: Callable[..., Any]
    postprocess: Callable[..., Any] | None = None
    sgd: Callable[[Any], tuple[int, int | None]] = lambda config: (1, None)
    gradients_on_workers: bool = False
    train_batch_env_steps: Callable[[Any], int] | None = None
    """Env steps in every learner update, where the plan fixes it: the learner then
    compiles its update while the rollout workers start."""
    network: Callable[[Any, tuple[int, ...], int], Any] = lambda config, obs_shape, num_actions: actor_critic_network(
        obs_shape, num_actions, config.hidden_sizes, config.conv_torso
    )
    target_network: bool = False
    replay: Callable[[Any], ReplayShards] | None = None
    explore: Callable[..., Any] | None = None
    encode: Callable[..., Any] | None = None
    device: DeviceSpec | None = None
    program: Callable[[Any, "AlgorithmSpec", str], Any] | None = None
    flow: Callable[..., list[tuple[Any, Any]]] | None = None


_ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    _ALGORITHMS[spec.name.upper()] = spec
    return spec


def _load_builtin() -> None:
    importlib.import_module("algorithms")


def list_algorithms() -> list[str]:
    """Names for ``--algo`` (a multi-agent run names its policies' algorithms in its config)."""
    _load_builtin()
    return sorted(spec.name for spec in _ALGORITHMS.values() if issubclass(spec.config_cls, CommonConfig))


def get_algorithm(name: str) -> AlgorithmSpec:
    """The registered algorithm called ``name`` (case-insensitive)."""
    _load_builtin()
    spec = _ALGORITHMS.get(name.upper())
    if spec is None:
        close = difflib.get_close_matches(name.upper(), list(_ALGORITHMS), n=3, cutoff=0.4)
        hint = f" Did you mean {close}?" if close else ""
        raise ConfigError(f"Unknown algorithm {name!r}.{hint} Available: {', '.join(list_algorithms())}.")
    return spec


def _spec_of(config: Any) -> AlgorithmSpec:
    _load_builtin()
    for spec in _ALGORITHMS.values():
        if type(config) is spec.config_cls:
            return spec
    raise ConfigError(f"No registered algorithm uses {type(config).__name__}.")


def _spaces(config: Any) -> tuple[gymnasium.Space, gymnasium.Space]:
    env = envs.make_cpu(config.env, **config.env_config)
    spaces = env.observation_space, env.action_space
    env.close()
    return check_spaces(config.env, *spaces)


def check_spaces(env_id: str, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The spaces, if the policies here support them: Box observations, Discrete actions."""
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise ConfigError(
            f"Environment {env_id!r} has action space {action_space}; the policies here "
            "support Discrete action spaces only."
        )
    if not isinstance(obs_space, gymnasium.spaces.Box):
        raise ConfigError(f"Environment {env_id!r} has observation space {obs_space}; a Box space is needed.")
    return obs_space, action_space


def resolve_mode(config: Any, spec: AlgorithmSpec) -> str:
    """``"ray"`` or ``"device"`` for ``config.mode``; "auto" is device mode for a gymnax env
    when the algorithm has one (an algorithm with its own ``program`` decides for itself what
    "auto" means). Raises :class:`ConfigError` for a mode that cannot run."""
    if spec.program is not None:
        return config.mode
    kind = envs.entry(config.env).kind
    if kind == "multiagent":
        raise ConfigError(f"{type(config).__name__}.env {config.env!r} is a multi-agent environment: train it with a "
                          "multi-agent config (jaxflow train --multiagent FILE), which maps its agents to policies.")
    gymnax_env = kind == "gymnax"
    can_device = gymnax_env and spec.device is not None
    name = type(config).__name__
    if config.mode == "device" and not can_device:
        why = (f"{spec.name} has no device mode (algorithms with one: {', '.join(device_algorithms())})"
               if spec.device is None else f"{config.env!r} is not a JAX environment (device mode runs gymnax/<id> envs)")
        raise ConfigError(f"{name}.mode='device' is not possible: {why}. Allowed: 'ray' or 'auto'.")
    mode = "device" if config.mode == "device" or (config.mode == "auto" and can_device) else "ray"
    if mode == "ray" and (config.num_seeds > 1 or config.sweep):
        raise ConfigError(
            f"{name}.num_seeds > 1 and {name}.sweep need device mode (a gymnax/<id> env and one of "
            f"{', '.join(device_algorithms())}); this run is in Ray mode."
        )
    return mode


def device_algorithms() -> list[str]:
    """Names of the algorithms that can train on the device."""
    _load_builtin()
    return sorted(spec.name for spec in _ALGORITHMS.values() if spec.device is not None)


def multiagent_algorithms() -> list[str]:
    """Names of the algorithms that can train a policy of a multi-agent run."""
    _load_builtin()
    return sorted(spec.name for spec in _ALGORITHMS.values() if spec.flow is not None)


def build_learner(config: Any, spec: AlgorithmSpec, spaces: tuple[gymnasium.Space, gymnasium.Space] | None = None,
                  network: Any = None) -> tuple[Any, Learner]:
    """The network and a freshly initialised learner for ``config`` (no Ray needed), for the
    spaces of ``config.env`` or the given ``(observation, action)`` spaces; ``network``
    replaces the algorithm's own (e.g. the same one with another convolution)."""
    obs_space, action_space = spaces or _spaces(config)
    network = network or spec.network(config, obs_space.shape, int(action_space.n))
    params = network.init(jax.random.PRNGKey(config.seed), jnp.zeros((1,) + obs_space.shape, jnp.float32))
    num_epochs, minibatch_size = spec.sgd(config)
    learner = Learner(
        functools.partial(spec.loss, apply_fn=network.apply, config=config),
        make_optimizer(config.lr, config.max_grad_norm),
        params,
        seed=config.seed,
        num_epochs=num_epochs,
        minibatch_size=minibatch_size,
        target_network=spec.target_network,
    )
    return network, learner


def init_ray(address: str | None = None) -> None:
    """Starts an embedded local Ray, or connects to ``address`` (a Ray cluster)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)


class Algorithm:
    """One training run.

    Example:
        >>> algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=2)  # doctest: +SKIP
        >>> result = algo.train()                                          # doctest: +SKIP
        >>> path = algo.save("runs/ppo"); algo.stop()                      # doctest: +SKIP
        >>> algo = Algorithm.restore("runs/ppo")                           # doctest: +SKIP
    """

    def __init__(self, config: Any, spec: AlgorithmSpec | None = None):
        self.spec = spec or _spec_of(config)
        self.config = config
        self.mode = resolve_mode(config, self.spec)
        self.replay: ReplayShards | None = None
        if self.spec.program is not None or self.mode == "device":
            build = self.spec.program or (lambda config, spec, mode: DeviceProgram(config, spec))
            self.program: Any = build(config, self.spec, self.mode)
            self.network, self.learner, self.workers = self.program.network, None, None
            self.replay = getattr(self.program, "replay", None)
            self._results = self.program.results()
            self.last_result: dict[str, Any] | None = None
            return
        self.program = None
        self.network, self.learner = build_learner(config, self.spec)
        worker_spec = WorkerSpec(
            config, self.network, self.spec.postprocess, self.spec.loss if self.spec.gradients_on_workers else None,
            self.spec.encode, self.spec.explore,
        )
        warm_up = self._start_warm_up(worker_spec)
        init_ray()
        self.workers = WorkerSet(worker_spec, self.learner.get_weights(), self.learner.version)
        self.replay = self.spec.replay(config) if self.spec.replay else None
        if warm_up is not None:
            warm_up.result()
        extra = () if self.replay is None else (self.replay,)
        self._results = self.spec.plan(self.workers, self.learner, config, *extra)
        self.last_result: dict[str, Any] | None = None

    def _start_warm_up(self, worker_spec: WorkerSpec) -> concurrent.futures.Future | None:
        # Compiling the update takes seconds; overlapping it with worker start-up takes
        # it out of the first iteration.
        if self.spec.train_batch_env_steps is None:
            return None
        obs_space, action_space = _spaces(self.config)
        batch = example_train_batch(worker_spec, obs_space, int(action_space.n), self.spec.train_batch_env_steps(self.config))
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner-warm-up")
        future = pool.submit(self.learner.warm_up, batch)
        pool.shutdown(wait=False)
        return future

    @classmethod
    def build(cls, algorithm: str | Any, **fields: Any) -> "Algorithm":
        """From an algorithm name (plus config fields) or from a config object."""
        if isinstance(algorithm, str):
            spec = get_algorithm(algorithm)
            return cls(spec.config_cls(**fields), spec)
        return cls(dataclasses.replace(algorithm, **fields) if fields else algorithm)

    @property
    def context(self) -> Context:
        return self._results.context

    @property
    def iteration(self) -> int:
        return int(self.context.counters["training_iteration"])

    def train(self) -> dict[str, Any]:
        """Runs one training iteration and returns its result dict."""
        self.last_result = next(self._results)
        return self.last_result

    def save(self, directory: str) -> str:
        """Writes a checkpoint under ``directory``; returns its path."""
        meta = {"algorithm": self.spec.name, "config": to_json_dict(self.config), "context": self.context.state()}
        write_replay = None if self.replay is None else self.replay.save
        path = checkpoint.save(directory, self.iteration, self._state_owner.get_state(), meta, write_replay)
        if self.replay is not None:
            self.replay.saved_at(path)
        return path

    @classmethod
    def restore(cls, path: str, **overrides: Any) -> "Algorithm":
        """Rebuilds the run saved at ``path`` (a checkpoint or a directory of them).

        ``overrides`` may change fields that do not change the learner's state,
        e.g. ``num_workers``.
        """
        ckpt, meta = _find(path)
        spec = get_algorithm(meta["algorithm"])
        config = from_json_dict(spec.config_cls, meta["config"])
        algo = cls(dataclasses.replace(config, **overrides) if overrides else config, spec)
        algo.load(ckpt)
        return algo

    def load(self, path: str) -> None:
        """Loads learner state and counters from a checkpoint into this run."""
        ckpt, meta = _find(path)
        self._state_owner.set_state(checkpoint.restore_state(ckpt, self._state_owner.get_state()))
        self.context.load_state(meta["context"])
        if self.replay is not None:
            self.replay.load(ckpt)
        if self.workers is not None:
            self.workers.sync_weights(self.learner.get_weights(), self.learner.version)

    @property
    def _state_owner(self) -> Any:
        """What holds the state a checkpoint saves: the device program, or the learner."""
        return self.program if self.program is not None else self.learner

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Runs the greedy policy for ``episodes`` episodes in the driver (in device mode, the
        policy of agent ``member``)."""
        if self.program is not None:
            return self.program.evaluate(episodes, seed, member)
        return evaluate_policy(self.config, self.network, self.learner.get_weights(), episodes, seed)

    def stop(self) -> None:
        """Stops the plan's background threads, the learner thread and the actors, and waits
        for the threads to end."""
        self._results.stop()
        if self.program is not None:
            self.program.stop()
            return
        self.learner.stop()
        self.workers.stop()
        if self.replay is not None:
            self.replay.stop()
        if not self._results.join():
            log.warning("some of the plan's background threads did not end within 30 s")


def _find(path: str) -> tuple[str, dict[str, Any]]:
    ckpt = checkpoint.latest(path)
    if ckpt is None:
        raise checkpoint.CheckpointError(f"No complete checkpoint under {os.path.abspath(path)!r}.")
    return ckpt, checkpoint.load_meta(ckpt)


def load_policy(path: str) -> tuple[Any, Any, Any]:
    """``(config, network, params)`` of a checkpoint, without starting Ray."""
    ckpt, meta = _find(path)
    spec = get_algorithm(meta["algorithm"])
    config = from_json_dict(spec.config_cls, meta["config"])
    if resolve_mode(config, spec) == "device":
        program = DeviceProgram(config, spec)
        program.set_state(checkpoint.restore_state(ckpt, program.get_state()))
        return config, program.network, program.get_weights()
    network, learner = build_learner(config, spec)
    state = checkpoint.restore_state(ckpt, learner.get_state())
    return config, network, jax.device_get(state.params)
