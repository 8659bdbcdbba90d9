"""Atari 2600 games through ale-py, with the standard preprocessing, in our registry.

Importing this module registers a factory for every ``ALE/<Game>-v5`` id (the ROMs ship
with ale-py), so ``envs.make_cpu("ALE/Pong-v5")`` returns the *preprocessed* game, and
``env_config`` keys configure it (see :class:`AtariConfig`; an unknown key raises
:class:`AtariConfigError` naming the allowed ones). ``preprocess=False`` gives the plain
ale-py v5 environment instead. ``gymnasium.make("ALE/Pong-v5")`` is untouched and stays raw.

What a preprocessed environment is, inside out (see :func:`wrap_atari`)::

    gymnasium.make(id, frameskip=1, repeat_action_probability=0.25, ...)   ale-py, sticky actions
    AtariPreprocessing       (gymnasium) no-op starts, frame skip with max-pooling of the
                             last two frames, grayscale, resize with cv2.INTER_AREA
    RecordEpisodeStatistics  (gymnasium) the game score: info["episode"] = {"r", "l", "t"}
                             when the *game* ends (unclipped, all lives)
    EpisodicLife             (ours, only if terminal_on_life_loss) a life lost ends the episode
    SignReward               (ours, only if clip_rewards) reward -> sign(reward),
                             info["raw_reward"] = the unclipped reward
    FrameStackObservation    (gymnasium) obs [frame_stack, H, W] uint8, oldest frame first;
                             the first observation of an episode is repeated to fill the stack

Episode returns. The game score is never lost: ``info["episode"]["r"]`` holds it when a
game ends (``RecordEpisodeStatistics`` sits below the clipping and the life-loss wrapper),
and every step's unclipped reward is in ``info["raw_reward"]`` when ``clip_rewards=True``
(``info.get("raw_reward", reward)`` is the raw reward in every configuration).
:class:`envs.VectorEnv` reports ``info["episode"]`` as its episode statistics, so training
results show whole-game, unclipped scores whatever the agent sees. (``info["episode"]["l"]``
counts agent steps, including the one no-op step ``EpisodicLife.reset`` plays after each lost
life.)

Why two wrappers of our own:

* ``SignReward``: gymnasium's ``ClipReward`` clips to an interval (``0.5 -> 0.5``); DQN clips
  to the sign (Mnih et al., 2015), and the raw reward must survive in ``info``.
* ``EpisodicLife``: gymnasium's ``AtariPreprocessing(terminal_on_life_loss=True)`` *restarts the
  game* at every lost life, so an agent never plays its later lives. The DQN protocol ends
  the learning episode at a lost life but plays on in the same game; only a real game over
  resets the emulator.

:class:`ALEVectorEnv` (:mod:`envs.ale_vector`) is the rollout workers' backend for these games
(``vector_env="auto"``, the default; ``vector_env="python"`` steps the wrappers here): ale-py's
own C++ vector environment behind the interface of :class:`envs.VectorEnv`; the settings and ids
both backends share are in :mod:`envs.atari_config`.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
)

from jaxflow.envs.ale_vector import ALEVectorEnv, runs_in_ale_vector
from jaxflow.envs.atari_config import AtariConfig, AtariConfigError, ale_py, atari_ids
from jaxflow.envs.user_envs import EnvContext, register

__all__ = [
    "ALEVectorEnv",
    "AtariConfig",
    "AtariConfigError",
    "EpisodicLife",
    "SignReward",
    "atari_ids",
    "make_atari",
    "runs_in_ale_vector",
    "wrap_atari",
]


class SignReward(gymnasium.Wrapper):
    """Reward clipping to its sign, as in DQN (Mnih et al., 2015): ``r -> sign(r)``.

    The unclipped reward of the step is kept in ``info["raw_reward"]``.
    """

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["raw_reward"] = float(reward)
        return obs, float(np.sign(float(reward))), terminated, truncated, info


class EpisodicLife(gymnasium.Wrapper):
    """A lost life ends the episode; the game itself goes on (Mnih et al., 2015).

    ``step`` returns ``terminated=True`` when the emulator's life counter drops. The next
    ``reset`` then does not restart the game: it plays one no-op step and returns that
    observation, so the agent continues with its remaining lives. Only after a real game
    over (or a truncation) does ``reset`` reset the wrapped environment.
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        atari: Any = self.env.unwrapped  # ale-py's AtariEnv, typed by gymnasium as the base Env
        lives = atari.ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        return obs, reward, terminated or life_lost, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        atari: Any = self.env.unwrapped  # ale-py's AtariEnv, typed by gymnasium as the base Env
        self._lives = atari.ale.lives()
        return obs, info


DEFAULT_CONFIG = AtariConfig()
"""The default settings, one frozen instance (``wrap_atari``'s default)."""


def wrap_atari(env: gymnasium.Env, config: AtariConfig = DEFAULT_CONFIG) -> gymnasium.Env:
    """Applies the preprocessing of ``config`` to an ale-py env made with ``frameskip=1``."""
    env = AtariPreprocessing(
        env,
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        terminal_on_life_loss=False,  # see EpisodicLife for why not this one
        grayscale_obs=config.grayscale,
        grayscale_newaxis=False,
        scale_obs=False,
    )
    env = RecordEpisodeStatistics(env)
    if config.terminal_on_life_loss:
        env = EpisodicLife(env)
    if config.clip_rewards:
        env = SignReward(env)
    return FrameStackObservation(env, config.frame_stack)


def make_atari(env_id: str, context: EnvContext | None = None, **env_config: Any) -> gymnasium.Env:
    """The Atari game ``env_id`` (``"ALE/Pong-v5"``), preprocessed as ``env_config`` says.

    Example:
        >>> env = make_atari("ALE/Pong-v5", clip_rewards=True)
        >>> env.observation_space.shape, env.observation_space.dtype
        ((4, 84, 84), dtype('uint8'))
    """
    del context  # seeded by reset(seed=...), like every gymnasium env
    if ale_py is None:  # pragma: no cover
        raise gymnasium.error.DependencyNotInstalled("Atari environments need ale-py: pip install ale-py")
    gymnasium.register_envs(ale_py)
    env_config = dict(env_config)
    render_mode = env_config.pop("render_mode", None)  # how the game shows itself, not its preprocessing
    config = AtariConfig.from_kwargs(env_id, env_config)
    # Any values: ``**ale_kwargs`` must also fit make()'s own keyword parameters.
    ale_kwargs: dict[str, Any] = dict(
        repeat_action_probability=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        max_num_frames_per_episode=config.max_num_frames_per_episode,
        **({"render_mode": render_mode} if render_mode else {}),
    )
    if not config.preprocess:
        return gymnasium.make(env_id, **ale_kwargs)
    return wrap_atari(gymnasium.make(env_id, frameskip=1, **ale_kwargs), config)


def _factory(env_id: str):
    def factory(context: EnvContext, **env_config: Any) -> gymnasium.Env:
        return make_atari(env_id, context, **env_config)

    factory.__name__ = factory.__qualname__ = f"make_atari[{env_id}]"
    return factory


def _register_all() -> None:
    for env_id in atari_ids():
        register(
            env_id,
            _factory(env_id),
            f"{env_id} preprocessed: no-op starts, frame skip 4 with max-pooling, 84x84 grayscale, 4 stacked "
            "frames, sticky actions 0.25 (env_config keys: envs.atari.AtariConfig; preprocess=False: the raw game)",
        )


_register_all()
