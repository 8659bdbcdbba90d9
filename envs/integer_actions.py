"""Integer ``Box`` action spaces as the discrete choices they are.

Some gymnasium envs declare a choice among a few actions as a ``Box`` of an integer dtype:
gymnasium's own ``tabular/CliffWalking-v0`` takes ``Box(0, 3, (1,), int32)``, its four moves.
Read as a ``Box``, it would be offered to SAC and TD3, whose real-valued actions nothing rounds,
and refused by DQN. So such an env is wrapped: a one-component integer ``Box`` becomes
``Discrete(high - low + 1)``, a 1-D one ``MultiDiscrete`` of its components' ranges; action
``a`` enters the env as ``low + a`` in the ``Box``'s shape and dtype.

Example:
    >>> import gymnasium
    >>> env = discrete_actions(gymnasium.make("tabular/CliffWalking-v0"))
    >>> env.action_space, env.action(3)
    (Discrete(4), array([3], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

MAX_CHOICES = 2**16
"""The most actions per component an integer ``Box`` may have to be read as a choice; one wider
(e.g. the whole int32 range) is no menu of actions, and is left a ``Box``."""


def is_integer_choice(space: gymnasium.Space) -> bool:
    """Whether ``space`` is a ``Box`` of an integer dtype, 1-D or scalar, whose components each
    take at most :data:`MAX_CHOICES` values."""
    if not isinstance(space, spaces.Box) or not np.issubdtype(space.dtype, np.integer) or len(space.shape) > 1:
        return False
    counts = space.high.astype(np.int64) - space.low.astype(np.int64) + 1
    return bool(counts.size and (counts <= MAX_CHOICES).all())


class IntegerChoiceActions(gymnasium.ActionWrapper):
    """An env whose integer ``Box`` actions are chosen as ``Discrete`` (one component) or
    ``MultiDiscrete`` (several) actions, counted from each component's lower bound."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        box = env.action_space
        assert isinstance(box, spaces.Box)  # is_integer_choice
        self._box = box
        counts = (box.high.astype(np.int64) - box.low.astype(np.int64) + 1).reshape(-1)
        self.action_space = spaces.Discrete(int(counts[0])) if counts.size == 1 else spaces.MultiDiscrete(counts)

    def action(self, action: Any) -> np.ndarray:
        chosen = np.asarray(action, np.int64).reshape(self._box.shape) + self._box.low.astype(np.int64)
        return chosen.astype(self._box.dtype)


def discrete_actions(env: gymnasium.Env) -> gymnasium.Env:
    """``env``, its actions chosen discretely where its action space is an integer ``Box``
    (:func:`is_integer_choice`); any other env as it is."""
    return IntegerChoiceActions(env) if is_integer_choice(env.action_space) else env
