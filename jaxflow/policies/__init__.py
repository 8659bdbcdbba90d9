"""Policies: a network plus an action distribution, used by workers, learners, device mode
and evaluation alike."""

from jaxflow.policies.build import actor_critic_policy, q_policy
from jaxflow.policies.distributions import ActionDistribution, Categorical, Greedy, distribution_for, sample_categorical
from jaxflow.policies.policy import Policy, actor_critic_outputs, q_value_outputs, unpack

__all__ = [
    "ActionDistribution",
    "Categorical",
    "Greedy",
    "Policy",
    "actor_critic_outputs",
    "actor_critic_policy",
    "distribution_for",
    "q_policy",
    "q_value_outputs",
    "sample_categorical",
    "unpack",
]
