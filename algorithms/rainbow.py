"""Rainbow (Hessel et al., 2018, "Rainbow: Combining Improvements in Deep Reinforcement
Learning"): DQN with all six of its parts on at once: double Q-learning, prioritized replay
(priorities from the distributional loss), dueling heads, n-step returns, C51's
distributional head and noisy layers in place of epsilon-greedy exploration.

DQN's spec, loss, replay and plan, imported (every part is a switch of
:class:`~jaxflow.algorithms.dqn.DQNConfig`); only the defaults differ, the paper's where
they carry over to CartPole-v1 and scaled where Atari's do not (below).
"""

from __future__ import annotations

import dataclasses

from jaxflow import register_algorithm
from jaxflow.algorithms.dqn import DQN, DQNConfig
from jaxflow.config.fields import NON_NEGATIVE, UNIT, param


@dataclasses.dataclass(frozen=True)
class RainbowConfig(DQNConfig):
    """DQN's settings with Rainbow's parts on. As in the paper: C51 with 51 atoms, noisy
    layers with sigma_0 = 0.5 and no epsilon-greedy exploration, 3-step returns, priority
    exponent 0.5 and importance sampling from 0.4 to 1, double Q-learning and dueling. Scaled
    to CartPole-v1: the support is ``[0, 100]``, CartPole's returns at ``gamma = 0.99`` (one
    reward per step, at most ``1 / (1 - gamma)``), where Atari's clipped rewards use
    ``[-10, 10]``; DQN's network, learning rate, replay size and target period."""

    c51: bool = param(True)
    """Distributional C51 head (see :class:`~jaxflow.algorithms.dqn.DQNConfig`)."""
    v_min: float = param(0.0)
    """C51's smallest return atom: CartPole's rewards are never negative."""
    v_max: float = param(100.0)
    """C51's largest return atom: ``1 / (1 - gamma)`` for CartPole's reward of 1 per step."""
    noisy: bool = param(True)
    """Noisy layers explore (Fortunato et al., 2018)."""
    epsilon_initial: float = param(0.0, UNIT)
    """No epsilon-greedy exploration: the noisy layers explore."""
    epsilon_final: float = param(0.0, UNIT)
    """No epsilon-greedy exploration: the noisy layers explore."""
    prioritized_replay_alpha: float = param(0.5, NON_NEGATIVE)
    """The paper's priority exponent omega = 0.5."""


# DQN's spec (policy, loss, postprocess, replay, plan, device mode) with Rainbow's defaults.
RAINBOW = register_algorithm(dataclasses.replace(DQN, name="Rainbow", config_cls=RainbowConfig))
