"""The settings of an Atari game, each an ``env_config`` key, and the ``ALE/<Game>-v5`` ids
ale-py provides; shared by the gymnasium-wrapped games (:mod:`envs.atari`) and ale-py's own
vector environment (:mod:`envs.ale_vector`)."""

from __future__ import annotations

import dataclasses
import typing
from types import ModuleType
from typing import Any

import gymnasium
import numpy as np

ale_py: ModuleType | None
try:
    import ale_py
except ImportError:  # pragma: no cover - ale-py is a dependency; keep `import envs` working without it
    ale_py = None

ALE_PREFIX = "ALE/"


class AtariConfigError(ValueError):
    """An ``env_config`` key an Atari environment does not know, or an invalid value."""


@dataclasses.dataclass(frozen=True)
class AtariConfig:
    """The settings of an Atari environment; each is an ``env_config`` key.

    Defaults follow Machado et al. (2018), "Revisiting the Arcade Learning Environment",
    and ale-py's v5 ids (sticky actions, minimal action set, 108,000-frame limit).
    """

    noop_max: int = 30
    """At reset, play a random number of no-ops in ``[1, noop_max]`` (0: none)."""
    frame_skip: int = 4
    """Emulator frames per agent step (the action repeats); the observation is the
    pixel-wise max of the last two of them (flicker removal)."""
    screen_size: int = 84
    """Observations are resized to ``screen_size x screen_size`` (cv2.INTER_AREA)."""
    grayscale: bool = True
    """Grayscale frames ``[k, H, W]``; False keeps RGB, ``[k, H, W, 3]``."""
    frame_stack: int = 4
    """Number of most recent frames in an observation, on the leading axis, oldest first."""
    terminal_on_life_loss: bool = False
    """Episodic life: a lost life ends the episode, the game plays on (see EpisodicLife)."""
    clip_rewards: bool = False
    """Rewards become their sign, -1/0/1; the raw reward goes to ``info["raw_reward"]``."""
    repeat_action_probability: float = 0.25
    """Sticky actions: the chance that the emulator repeats the previous action each frame."""
    full_action_space: bool = False
    """All 18 actions instead of the game's minimal set."""
    max_num_frames_per_episode: int = 108_000
    """Emulator frames before the episode is truncated (27,000 agent steps at frame_skip 4)."""
    preprocess: bool = True
    """False: the plain ale-py v5 environment (its own frame skip of 4, RGB frames); only
    the sticky-action, action-space and frame-limit keys may then be set."""

    @classmethod
    def from_kwargs(cls, env_id: str, kwargs: dict[str, Any]) -> AtariConfig:
        """Validates ``env_config`` keys and values; errors name the allowed keys."""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise AtariConfigError(
                f"Unknown env_config key(s) {unknown} for Atari environment {env_id!r}; allowed keys: {allowed}."
            )
        config = cls(**kwargs)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value, kind = getattr(config, f.name), hints[f.name]
            ok = (
                isinstance(value, bool)
                if kind is bool
                else (
                    isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                    if kind is int
                    else isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
                )
            )
            if not ok:
                raise AtariConfigError(
                    f"env_config key {f.name!r} of {env_id!r} must be a {kind.__name__}, got {value!r}."
                )
        bounds = {
            "noop_max": config.noop_max >= 0,
            "frame_skip": config.frame_skip >= 1,
            "screen_size": config.screen_size >= 1,
            "frame_stack": config.frame_stack >= 1,
            "repeat_action_probability": 0.0 <= config.repeat_action_probability <= 1.0,
            "max_num_frames_per_episode": config.max_num_frames_per_episode >= 1,
        }
        for name, ok in bounds.items():
            if not ok:
                raise AtariConfigError(
                    f"env_config key {name!r} of {env_id!r} is out of range: {getattr(config, name)!r} "
                    "(noop_max >= 0; frame_skip, screen_size, frame_stack, max_num_frames_per_episode >= 1; "
                    "0 <= repeat_action_probability <= 1)."
                )
        if not config.preprocess:
            raw_keys = {"preprocess", "repeat_action_probability", "full_action_space", "max_num_frames_per_episode"}
            extra = sorted(set(kwargs) - raw_keys)
            if extra:
                raise AtariConfigError(
                    f"env_config keys {extra} of {env_id!r} configure the preprocessing, which "
                    f"preprocess=False turns off; allowed with it: {sorted(raw_keys)}."
                )
        return config


def atari_ids() -> list[str]:
    """Every ``ALE/<Game>-v5`` id ale-py registers (empty without ale-py)."""
    if ale_py is None:
        return []
    gymnasium.register_envs(ale_py)
    return sorted(k for k in gymnasium.registry if k.startswith(ALE_PREFIX) and k.endswith("-v5"))
