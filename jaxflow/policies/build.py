"""The standard policies of an algorithm config: an actor-critic (policy-gradient
algorithms) or a Q-network read greedily (value-based ones), for the environment's spaces."""

from __future__ import annotations

from typing import Any

import gymnasium

from jaxflow.networks.build import actor_critic_network, q_network
from jaxflow.policies.distributions import Greedy, distribution_for
from jaxflow.policies.policy import Policy, q_value_outputs


def actor_critic_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """An actor-critic network (convolutional for frame stacks, else an MLP of
    ``config.hidden_sizes``) and the action space's distribution."""
    distribution = distribution_for(action_space)
    num_inputs = int(action_space.n)  # Discrete: one logit per action
    network = actor_critic_network(obs_space.shape, num_inputs, config.hidden_sizes, config.conv_torso)
    return Policy(network, distribution, tuple(obs_space.shape))


def q_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    """A Q-network (dueling if ``config.dueling``), read as greedy inputs and ``max_a Q``."""
    distribution_for(action_space)  # Discrete only: one Q-value per action
    num_actions = int(action_space.n)
    network = q_network(obs_space.shape, num_actions, config.hidden_sizes, config.conv_torso, config.dueling)
    return Policy(network, Greedy(num_actions), tuple(obs_space.shape), outputs=q_value_outputs)
