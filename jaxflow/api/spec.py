"""What an algorithm page registers: :class:`AlgorithmSpec`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxflow.ondevice.spec import DeviceSpec
from jaxflow.policies.build import actor_critic_policy
from jaxflow.policies.policy import Policy
from jaxflow.replay.shards import ReplayShards


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm page registers.

    ``loss(params, batch, rng, *, policy, config) -> (loss, metrics)`` on a flat batch, acting
    through the :class:`~jaxflow.policies.Policy` (``policy.apply``, ``policy.distribution``);
    ``postprocess(traj, config) -> traj`` runs on the rollout workers (e.g. GAE) and returns a
    flat dict; fields it returns unchanged are not copied there, so it should pass the
    observations through as they came (see :class:`~jaxflow.rollout.postprocess.HostPostprocess`);
    ``plan(workers, learner, config)`` returns the iterator of training results;
    ``sgd(config) -> (num_epochs, minibatch_size)`` shapes the learner's update;
    ``gradients_on_workers`` gives the workers the loss (A3C);
    ``policy(config, observation_space, action_space)`` builds the policy (default: an
    actor-critic, convolutional for image observations, with the action space's distribution,
    see :func:`~jaxflow.policies.actor_critic_policy`);
    ``target_network`` gives the learner a target copy of the parameters (DQN);
    ``replay(config)`` builds the replay shards, which the plan then gets as a fourth
    argument and which are checkpointed with the learner;
    ``explore`` and ``encode`` go to the rollout workers (see
    :class:`~jaxflow.rollout.worker.WorkerSpec`); ``device`` lets the algorithm train on the
    device with a JAX environment (see :class:`~jaxflow.ondevice.spec.DeviceSpec`);
    ``program(config, spec, mode)`` builds the run as a :class:`~jaxflow.api.program.Program`
    (default: :func:`~jaxflow.api.program.standard_program`, Ray workers + learner + plan or
    device mode); an algorithm whose loop is not "sample, then update" (MAML's inner and
    outer loops, a multi-agent run) brings its own; ``flow(experiences, policy)`` trains one
    policy of a multi-agent run from a stream of its own fragments (see
    :mod:`jaxflow.ops.multiagent_ops`): its sub-flows, each with its outputs per round of sampling.
    """

    name: str
    config_cls: type
    loss: Callable[..., Any] | None
    plan: Callable[..., Any] | None
    postprocess: Callable[..., Any] | None = None
    sgd: Callable[[Any], tuple[int, int | None]] = lambda config: (1, None)
    gradients_on_workers: bool = False
    train_batch_env_steps: Callable[[Any], int] | None = None
    """Env steps in every learner update, where the plan fixes it: the learner then
    compiles its update while the rollout workers start."""
    policy: Callable[[Any, Any, Any], Policy] = actor_critic_policy
    """``policy(config, observation_space, action_space)``: the network and action
    distribution every part of a run acts with (workers, learner, device mode, evaluation)."""
    target_network: bool = False
    replay: Callable[[Any], ReplayShards] | None = None
    explore: Callable[..., Any] | None = None
    encode: Callable[..., Any] | None = None
    device: DeviceSpec | None = None
    program: Callable[[Any, AlgorithmSpec, str], Any] | None = None
    """Builds the run's :class:`~jaxflow.api.program.Program`; None: the standard one."""
    flow: Callable[..., list[tuple[Any, Any]]] | None = None
