"""The standard policies of an algorithm config: an actor-critic (policy-gradient
algorithms) or a Q-network read greedily (value-based ones), for the environment's spaces.
An observation space that carries an action mask (:class:`~jaxflow.envs.masking.MaskedBox`)
makes a masked policy (``Policy.action_mask``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium

from jaxflow.config.fields import ConfigError
from jaxflow.envs.masking import MaskedBox
from jaxflow.networks.build import actor_critic_network, is_frame_stack, q_network
from jaxflow.networks.continuous import ActorCritics
from jaxflow.networks.models import build_model, check_outputs
from jaxflow.networks.recurrent import LSTMActorCritic
from jaxflow.policies.categorical import Greedy
from jaxflow.policies.distributional import categorical_q_outputs, quantile_q_outputs
from jaxflow.policies.distributions import distribution_for
from jaxflow.policies.policy import Policy, q_value_outputs


def actor_critic_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """An actor-critic network (convolutional for frame stacks, else an MLP of
    ``config.hidden_sizes``) and the action space's distribution (a ``Box``: a Gaussian,
    its log-std state-dependent if ``config.state_dependent_std``), or ``config.model``; with
    ``config.use_lstm`` a recurrent one (:class:`~jaxflow.networks.recurrent.LSTMActorCritic`,
    or the model, then recurrent itself: :mod:`jaxflow.networks.models`)."""
    distribution = distribution_for(action_space, "gaussian", config.state_dependent_std)
    obs_shape = tuple(obs_space.shape or ())
    masked = isinstance(obs_space, MaskedBox)
    if config.model:
        network = build_model(config.model, config.model_config, distribution.num_inputs)
        expected = ((2, distribution.num_inputs), (2,))
        what = f"(distribution inputs, value) for {config.env}"
        check_outputs(config.model, network, obs_shape, expected, what, recurrent=config.use_lstm)
    elif config.use_lstm:
        network = _lstm_network(config, obs_shape, distribution)
    else:
        network = actor_critic_network(
            obs_shape, distribution.num_inputs, config.hidden_sizes, config.conv_torso, distribution.num_free_inputs
        )
    return Policy(network, distribution, obs_shape, action_mask=masked, recurrent=config.use_lstm)


def _lstm_network(config: Any, obs_shape: tuple[int, ...], distribution: Any) -> LSTMActorCritic:
    if is_frame_stack(obs_shape):
        raise ConfigError(
            f"{type(config).__name__}.use_lstm=True: the LSTM network takes flat observations, not {config.env}'s "
            f"image frames {obs_shape}."
        )
    return LSTMActorCritic(
        distribution.num_inputs,
        tuple(config.hidden_sizes),
        config.lstm_units,
        max(1, len(obs_shape)),
        distribution.num_free_inputs,
    )


def q_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """A Q-network (dueling if ``config.dueling``), read as greedy inputs and ``max_a Q``: with
    ``config.c51`` or ``config.qr`` one distribution per action, read through its mean
    (:mod:`~jaxflow.policies.distributional`); with ``config.noisy`` noisy layers."""
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise TypeError(f"a Q-network needs a Discrete action space (one value per action), got {action_space}")
    num_actions, obs_shape = int(action_space.n), tuple(obs_space.shape or ())
    num_atoms, outputs = q_readout(config)
    if config.model:
        network = build_model(config.model, config.model_config, num_actions)
        expected = (2, num_actions) if num_atoms == 1 else (2, num_actions, num_atoms)
        check_outputs(config.model, network, obs_shape, expected, f"Q-values for {config.env}")
    else:
        sigma0 = config.noisy_sigma0 if config.noisy else None
        network = q_network(
            obs_shape, num_actions, config.hidden_sizes, config.conv_torso, config.dueling, num_atoms, sigma0
        )
    masked = isinstance(obs_space, MaskedBox)
    return Policy(network, Greedy(num_actions), obs_shape, outputs=outputs, action_mask=masked, noisy=config.noisy)


def q_readout(config: Any) -> tuple[int, Callable[..., tuple[Any, Any]]]:
    """Outputs per action and their reader: C51's ``num_atoms`` logits, QR-DQN's
    ``num_quantiles`` quantiles, or one Q-value."""
    if config.c51:
        return config.num_atoms, functools.partial(categorical_q_outputs, v_min=config.v_min, v_max=config.v_max)
    if config.qr:
        return config.num_quantiles, quantile_q_outputs
    return 1, q_value_outputs


def actor_critics_policy(
    config: Any,
    obs_space: gymnasium.Space,
    action_space: gymnasium.Space,
    box: str,
    initial_alpha: float | None,
    num_critics: int = 2,
) -> Policy:
    """An actor and ``num_critics`` critics on a Box action space (SAC: ``box="squashed"`` with a
    learned temperature from ``initial_alpha``; TD3: ``box="deterministic"``), MLPs of ``config.hidden_sizes`` started as ``config.layer_init`` says."""
    if config.model:
        raise ConfigError(
            f"{type(config).__name__}.model: this algorithm's actor and critics take no custom model yet."
        )
    distribution = distribution_for(action_space, box)
    obs_shape = tuple(obs_space.shape or ())
    network = ActorCritics(
        distribution.num_inputs,
        distribution.action_shape[0],
        tuple(config.hidden_sizes),
        num_critics,
        initial_alpha,
        config.layer_init,
    )
    return Policy(network, distribution, obs_shape, inputs_method="actor")
