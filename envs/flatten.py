"""Observations as one float32 vector: every gymnasium env whose observation space is not a
``Box`` is wrapped here, so that workers, evaluation and the space check all see a ``Box``.

``Discrete`` observations become one-hot vectors, ``MultiDiscrete`` one one-hot block per
component, ``MultiBinary`` its bits, and ``Tuple`` and ``Dict`` (nested to any depth) the
concatenation of their parts in gymnasium's order (a ``Dict``'s keys sorted): exactly
``gymnasium.spaces.flatten``, with the values cast to float32. A ``Dict`` with an
``action_mask`` key puts the mask last instead (:mod:`jaxflow.envs.masking`).

Example:
    >>> import gymnasium
    >>> env = flatten_observations(gymnasium.make("FrozenLake-v1"))
    >>> env.observation_space
    Box(0.0, 1.0, (16,), float32)
    >>> obs, _ = env.reset(seed=0)
    >>> int(obs.argmax()), float(obs.sum())
    (0, 1.0)
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from jaxflow.envs.masking import FlatMaskedObservation, has_action_mask

# The spaces a vector is made of directly; Tuple and Dict are flattened when all their parts are.
_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def is_flattenable(space: gymnasium.Space) -> bool:
    """Whether ``space`` becomes a vector here: a Box, Discrete, MultiDiscrete or MultiBinary,
    or a Tuple or Dict of such spaces (to any depth). Text, Graph, Sequence and OneOf are
    not: gymnasium flattens some of them, but to character codes or padded variable-length
    rows, which are no features for a network."""
    if isinstance(space, _LEAVES):
        return True
    if isinstance(space, spaces.Tuple):
        return all(is_flattenable(s) for s in space.spaces)
    if isinstance(space, spaces.Dict):
        return all(is_flattenable(s) for s in space.spaces.values())
    return False


def flat_space(space: gymnasium.Space) -> spaces.Box:
    """The float32 ``Box`` of ``space``'s flattened observations (one-hot bounds are 0 and 1)."""
    box = spaces.flatten_space(space)
    assert isinstance(box, spaces.Box)  # is_flattenable spaces flatten to a Box
    return spaces.Box(box.low.astype(np.float32), box.high.astype(np.float32), box.shape, np.float32)


class FlatObservation(gymnasium.ObservationWrapper):
    """An env's observations flattened (:func:`gymnasium.spaces.flatten`) to a float32 vector."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._inner_space = env.observation_space
        self.observation_space = flat_space(env.observation_space)

    def observation(self, observation: Any) -> np.ndarray:
        flat = spaces.flatten(self._inner_space, observation)
        return np.asarray(flat, np.float32)


def flatten_observations(env: gymnasium.Env, env_id: str | None = None) -> gymnasium.Env:
    """``env`` with its observations flattened, unless they are a ``Box`` (images included,
    kept as they are) or cannot be flattened (left for the space check to refuse by name).
    A ``Dict`` with an ``action_mask`` key is flattened with the mask last, and a mask with
    no legal action raises naming ``env_id`` (:class:`~jaxflow.envs.masking.FlatMaskedObservation`)."""
    space = env.observation_space
    if isinstance(space, spaces.Box) or not is_flattenable(space):
        return env
    if has_action_mask(space):
        return FlatMaskedObservation(env, env_id or (env.spec.id if env.spec else type(env.unwrapped).__name__))
    return FlatObservation(env)
