"""Legal actions: a ``Dict`` observation with an ``action_mask`` key (as PettingZoo's classic
games give) flattened so that policies can read the mask.

The flat vector is the other keys' features (``gymnasium.spaces.flatten`` of the ``Dict``
without the mask, keys sorted), then the mask's ``num_actions`` entries: 1.0 where an action is
legal (the env's mask is not 0 there), else 0.0. Its space is a :class:`MaskedBox`, a ``Box`` that says how many of its last entries are
the mask: everything that treats observations as a ``Box`` goes on doing so, and the policy
builders (``jaxflow.policies.build``) see from the space that the env is masked. The network
sees the mask as features too.

Example:
    >>> from jaxflow import envs
    >>> envs.make("jaxflow/MaskedChoice-v0").observation_space
    MaskedBox(0.0, 1.0, (13,), float32, action_mask=MultiBinary(6))
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces

ACTION_MASK = "action_mask"
"""The key of a ``Dict`` observation that holds the legal actions."""


class ActionMaskError(ValueError):
    """An environment gave an action mask with no legal action in a state the agent acts in."""


def has_action_mask(space: gymnasium.Space) -> bool:
    """Whether ``space`` is a ``Dict`` with an ``action_mask`` key (at its top level)."""
    return isinstance(space, spaces.Dict) and ACTION_MASK in space.spaces


class MaskedBox(spaces.Box):
    """The float32 ``Box`` of a flattened observation whose last ``num_actions`` entries are the
    action mask (1: legal); ``mask_space`` is the env's own space of the mask, which the space
    check holds against the action space.

    Example:
        >>> box = MaskedBox(np.zeros(3, np.float32), np.ones(3, np.float32), spaces.MultiBinary(2))
        >>> box.num_actions, box.shape
        (2, (3,))
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, mask_space: gymnasium.Space):
        super().__init__(low, high, low.shape, np.float32)
        self.mask_space = mask_space

    @property
    def num_actions(self) -> int:
        return int(spaces.flatdim(self.mask_space))

    def __repr__(self) -> str:
        return f"Masked{super().__repr__()[:-1]}, action_mask={self.mask_space})"


def _features_space(space: spaces.Dict) -> spaces.Dict | None:
    rest = {k: s for k, s in space.spaces.items() if k != ACTION_MASK}
    return spaces.Dict(rest) if rest else None


def masked_space(space: spaces.Dict) -> MaskedBox:
    """The :class:`MaskedBox` of a ``Dict`` with an ``action_mask``: features, then the mask's
    entries in ``[0, 1]``."""
    mask = space[ACTION_MASK]
    low, high = [np.zeros(spaces.flatdim(mask), np.float32)], [np.ones(spaces.flatdim(mask), np.float32)]
    features = _features_space(space)
    if features is not None:
        box = spaces.flatten_space(features)
        assert isinstance(box, spaces.Box)  # a flattenable Dict flattens to a Box
        low.insert(0, np.asarray(box.low, np.float32))
        high.insert(0, np.asarray(box.high, np.float32))
    return MaskedBox(np.concatenate(low), np.concatenate(high), mask)


class FlatMaskedObservation(gymnasium.Wrapper):
    """An env's ``Dict`` observations with an ``action_mask``, flattened features first and the
    mask last (:class:`MaskedBox`). An observation the agent will act on (after ``reset()``, or
    after a ``step()`` that did not end the episode) with no legal action raises
    :class:`ActionMaskError` naming ``env_id``: no policy can act there. The last observation
    of an episode may have none (a finished board game)."""

    def __init__(self, env: gymnasium.Env, env_id: str):
        super().__init__(env)
        assert isinstance(env.observation_space, spaces.Dict)  # has_action_mask
        self._features = _features_space(env.observation_space)
        self._mask_space = env.observation_space[ACTION_MASK]
        self.observation_space = masked_space(env.observation_space)
        self._env_id, self._steps = env_id, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._steps = 0
        return self._flat(obs, "reset()", check=True), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        where = f"step() (step {self._steps} of the episode)"
        return self._flat(obs, where, check=not (terminated or truncated)), reward, terminated, truncated, info

    def _flat(self, obs: Any, where: str, check: bool) -> np.ndarray:
        mask = (np.asarray(spaces.flatten(self._mask_space, obs[ACTION_MASK])) != 0).astype(np.float32)
        if check and not mask.any():
            raise ActionMaskError(
                f"Environment {self._env_id!r} gave an action_mask with no legal action from {where}: "
                f"every observation an agent acts on needs at least one legal action."
            )
        if self._features is None:
            return mask
        features = spaces.flatten(self._features, {k: obs[k] for k in self._features.spaces})
        return np.concatenate([np.asarray(features, np.float32), mask])
