"""What an algorithm page registers: :class:`AlgorithmSpec`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import optax

from jaxflow.learn.sgd import make_optimizer
from jaxflow.ondevice.spec import DeviceSpec
from jaxflow.policies.build import actor_critic_policy
from jaxflow.policies.policy import Policy
from jaxflow.replay.local import LocalReplay
from jaxflow.replay.shards import ReplayShards

ACTION_SPACES = ("Box", "Discrete", "MultiDiscrete")
"""The gymnasium action spaces a policy of the engine can act in (see
:func:`~jaxflow.policies.distribution_for`)."""


@dataclasses.dataclass(frozen=True)
class LearnerHooks:
    """How the learner trains on a batch (all optional)."""

    sgd: Callable[[Any], tuple[int, int | None]] = lambda config: (1, None)
    """``sgd(config) -> (num_epochs, minibatch_size)``: passes over each train batch, and
    the size of its minibatches (None: the whole batch in one step)."""
    target_network: bool = False
    """The learner keeps a target copy of the parameters (DQN), refreshed by ``UpdateTargetNetwork``."""
    train_batch_env_steps: Callable[[Any], int] | None = None
    """Env steps in every learner update, where the plan fixes it: the learner then
    compiles its update while the rollout workers start."""
    optimizer: Callable[[Any], Callable[..., optax.GradientTransformation]] = lambda config: make_optimizer
    """``optimizer(config) -> factory``, ``factory(lr, max_grad_norm)`` the learner's optax
    optimizer (default: Adam after global-norm clipping; TD3: the actor's steps delayed).
    Device mode wraps the factory in ``optax.inject_hyperparams``, so swept values reach it."""


@dataclasses.dataclass(frozen=True)
class WorkerHooks:
    """What the rollout workers run besides the policy and ``postprocess`` (see
    :class:`~jaxflow.rollout.worker.WorkerSpec`)."""

    explore: Callable[..., Any] | None = None
    """``explore(rng, policy_inputs, config, worker_index, env_steps) -> (actions, logp)``:
    how a worker acts instead of sampling the policy (DQN's per-worker epsilon-greedy)."""
    encode: Callable[..., Any] | None = None
    """``encode(fragment, config)``: what a worker sends instead of its time-major fragment
    (DQN's replay rows, IMPALA's sequences)."""
    gradients: bool = False
    """The workers compute the loss's gradients on their own fragments (A3C)."""


@dataclasses.dataclass(frozen=True)
class RunHooks:
    """The kinds of run beyond Ray rollout workers + learner + plan that the algorithm takes part in."""

    replay: Callable[[Any], ReplayShards | LocalReplay] | None = None
    """``replay(config)`` builds replay shards (or the replay in the driver's process), which the
    plan gets as a fourth argument and which are checkpointed with the learner."""
    device: DeviceSpec | None = None
    """Lets the algorithm train on the device with a JAX environment (see
    :class:`~jaxflow.ondevice.spec.DeviceSpec`)."""
    program: Callable[[Any, AlgorithmSpec, str], Any] | None = None
    """``program(config, spec, mode)`` builds the run as a :class:`~jaxflow.api.program.Program`
    for an algorithm whose loop is not "sample, then update" (MAML's inner and outer loops, a
    multi-agent run); None: :func:`~jaxflow.api.program.standard_program`."""
    program_kinds: tuple[str, ...] = ()
    """The kinds of environment a ``program`` trains, as ``jaxflow list`` shows them
    (``jaxflow.envs``' kinds, e.g. ``"gymnasium"``, or ``"tasks"``: MAML's task distributions);
    a standard program's follow from ``plan`` (gymnasium envs) and ``device`` (the JAX kinds)."""
    flow: Callable[..., list[tuple[Any, Any]]] | None = None
    """``flow(experiences, policy)`` trains one policy of a multi-agent run from a stream of
    its own fragments (see :mod:`jaxflow.ops.multiagent_ops`): its sub-flows, each with its
    outputs per round of sampling."""


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm page registers: its name, config, policy, loss, postprocess and plan,
    and three groups of optional hooks (the learner's, the workers', the kinds of run).

    Example:
        >>> spec = AlgorithmSpec("PG", CommonConfig, loss, plan, learner=LearnerHooks(sgd=lambda c: (4, 64)))  # doctest: +SKIP
        >>> register_algorithm(spec)  # doctest: +SKIP
    """

    name: str
    config_cls: type
    """The algorithm's frozen config dataclass."""
    loss: Callable[..., Any] | None
    """``loss(params, batch, rng, *, policy, config) -> (loss, metrics)`` on a flat batch,
    acting through the :class:`~jaxflow.policies.Policy` (``policy.apply``, ``policy.distribution``)."""
    plan: Callable[..., Any] | None
    """``plan(workers, learner, config[, replay])`` returns the iterator of training results."""
    postprocess: Callable[..., Any] | None = None
    """``postprocess(traj, config) -> traj`` runs on the rollout workers (e.g. GAE) and returns
    a flat dict; fields it returns unchanged are not copied there, so it should pass the
    observations through as they came (see :class:`~jaxflow.rollout.postprocess.HostPostprocess`)."""
    policy: Callable[[Any, Any, Any], Policy] = actor_critic_policy
    """``policy(config, observation_space, action_space)``: the network and action
    distribution every part of a run acts with (workers, learner, device mode, evaluation);
    default an actor-critic, convolutional for image observations, with the action space's
    distribution (see :func:`~jaxflow.policies.actor_critic_policy`)."""
    action_spaces: tuple[str, ...] = ACTION_SPACES
    """The gymnasium action space classes the algorithm acts in (by class name): any env
    with another one is refused before a run starts, naming the algorithms that can."""
    learner: LearnerHooks = LearnerHooks()
    workers: WorkerHooks = WorkerHooks()
    run: RunHooks = RunHooks()
