"""Policies: a network plus an action distribution, used by workers, learners, device mode
and evaluation alike."""

from jaxflow.policies.build import actor_critic_policy, actor_critics_policy, q_policy
from jaxflow.policies.categorical import (
    MASKED_LOGIT,
    Categorical,
    Greedy,
    MultiCategorical,
    legal_inputs,
    mask_inputs,
    sample_categorical,
)
from jaxflow.policies.distributional import categorical_q_outputs, categorical_support, quantile_q_outputs
from jaxflow.policies.distributions import BOX_KINDS, ActionDistribution, distribution_for
from jaxflow.policies.gaussian import BoxBounds, Deterministic, Gaussian, SquashedGaussian
from jaxflow.policies.policy import Policy, actor_critic_outputs, q_value_outputs, unpack

__all__ = [
    "BOX_KINDS",
    "MASKED_LOGIT",
    "ActionDistribution",
    "BoxBounds",
    "Categorical",
    "Deterministic",
    "Gaussian",
    "Greedy",
    "MultiCategorical",
    "Policy",
    "SquashedGaussian",
    "actor_critic_outputs",
    "actor_critic_policy",
    "actor_critics_policy",
    "categorical_q_outputs",
    "categorical_support",
    "distribution_for",
    "legal_inputs",
    "mask_inputs",
    "q_policy",
    "q_value_outputs",
    "quantile_q_outputs",
    "sample_categorical",
    "unpack",
]
