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

:class:`ALEVectorEnv` is a second, opt-in backend: ale-py's own C++ vector environment
(``ale_py.vector_env.AtariVectorEnv``, threaded), behind the interface of
:class:`envs.VectorEnv`. Its frames match this module's exactly (same max-pooling and
INTER_AREA resize), but it zero-pads the frame stack after a reset and draws its no-ops
its own way, so the two backends are close, not identical. Nothing selects it yet:
rollout workers build an :class:`envs.VectorEnv`.
"""

from __future__ import annotations

import dataclasses
import typing
from types import ModuleType
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
)

from jaxflow.envs.registry import EnvContext, register
from jaxflow.envs.vector import EnvSpaceError, VectorStep

ale_py: ModuleType | None
try:
    import ale_py
except ImportError:  # pragma: no cover - ale-py is a dependency; keep `import envs` working without it
    ale_py = None

ALE_PREFIX = "ALE/"

__all__ = [
    "ALEVectorEnv",
    "AtariConfig",
    "AtariConfigError",
    "EpisodicLife",
    "SignReward",
    "atari_ids",
    "make_atari",
    "wrap_atari",
]


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


def atari_ids() -> list[str]:
    """Every ``ALE/<Game>-v5`` id ale-py registers (empty without ale-py)."""
    if ale_py is None:
        return []
    gymnasium.register_envs(ale_py)
    return sorted(k for k in gymnasium.registry if k.startswith(ALE_PREFIX) and k.endswith("-v5"))


def wrap_atari(env: gymnasium.Env, config: AtariConfig = AtariConfig()) -> gymnasium.Env:
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
    config = AtariConfig.from_kwargs(env_id, env_config)
    # Any values: ``**ale_kwargs`` must also fit make()'s own keyword parameters.
    ale_kwargs: dict[str, Any] = dict(
        repeat_action_probability=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        max_num_frames_per_episode=config.max_num_frames_per_episode,
    )
    if not config.preprocess:
        return gymnasium.make(env_id, **ale_kwargs)
    return wrap_atari(gymnasium.make(env_id, frameskip=1, **ale_kwargs), config)


def _factory(env_id: str):
    def factory(context: EnvContext, **env_config: Any) -> gymnasium.Env:
        return make_atari(env_id, context, **env_config)

    factory.__name__ = factory.__qualname__ = f"make_atari[{env_id}]"
    return factory


class ALEVectorEnv:
    """ale-py's threaded C++ vector of Atari games behind the interface of :class:`envs.VectorEnv`.

    ``reset() -> obs``, ``step(actions) -> VectorStep``, ``pop_episodes()``, ``close()``, and
    the single-env ``observation_space``/``action_space``; the ``env_config`` keys are
    :class:`AtariConfig`'s. The emulators step in ``num_threads`` threads (0: one per core).
    ale-py resets finished games itself (same-step autoreset, the final observation comes
    back in ``info["final_obs"]``); ``terminal_on_life_loss`` uses its ``life_loss_info``
    mode (a lost life ends the episode, the game plays on), like :class:`EpisodicLife`.
    Rewards are clipped here, not in ale-py, so that ``pop_episodes`` reports game scores:
    unclipped, summed over all lives of a game. ``step_async`` hands the actions to the
    emulator threads and returns at once; ``step_wait`` waits for them, so a caller's own
    work in between runs while the games step.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        env_config: dict[str, Any] | None = None,
        worker_index: int = 0,
        incarnation: int = 0,
        num_threads: int = 0,
    ):
        del worker_index, incarnation
        if ale_py is None:  # pragma: no cover
            raise gymnasium.error.DependencyNotInstalled("Atari environments need ale-py: pip install ale-py")
        from ale_py.vector_env import AtariVectorEnv

        config = AtariConfig.from_kwargs(env_id, dict(env_config or {}))
        if not config.preprocess:
            raise AtariConfigError(f"ALEVectorEnv always preprocesses; preprocess=False is not supported ({env_id!r}).")
        if env_id not in atari_ids():
            raise AtariConfigError(f"ALEVectorEnv runs ALE/<Game>-v5 ids only, got {env_id!r}.")
        game = gymnasium.registry[env_id].kwargs["game"]
        self.env_id, self.num_envs, self._seed, self.config = env_id, num_envs, seed, config
        self._venv = AtariVectorEnv(
            game,
            num_envs,
            num_threads=num_threads,
            max_num_frames_per_episode=config.max_num_frames_per_episode,
            repeat_action_probability=config.repeat_action_probability,
            full_action_space=config.full_action_space,
            autoreset_mode="SameStep",
            img_height=config.screen_size,
            img_width=config.screen_size,
            grayscale=config.grayscale,
            stack_num=config.frame_stack,
            frameskip=config.frame_skip,
            maxpool=True,
            noop_max=config.noop_max,
            episodic_life=False,  # ale-py's episodic_life restarts the game at a lost life
            life_loss_info=config.terminal_on_life_loss,
            reward_clipping=False,
            use_fire_reset=False,
        )
        self.observation_space = self._venv.single_observation_space
        action_space = self._venv.single_action_space
        assert isinstance(action_space, gymnasium.spaces.Discrete)  # ALE games have discrete actions
        self.action_space = action_space
        self._lives = np.zeros(num_envs, np.int64)
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._done_returns: list[float] = []
        self._done_lengths: list[int] = []
        self._checked_step = False
        self._pending = False

    def reset(self) -> np.ndarray:
        if self._pending:
            raise RuntimeError(f"{self.env_id}: reset() between step_async() and step_wait().")
        obs: np.ndarray  # ale-py leaves its reset()'s ObsType unbound
        obs, info = self._venv.reset(seed=self._seed)  # seeds seed, seed + 1, ... like VectorEnv
        self._lives[:] = info["lives"]
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> VectorStep:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Starts the emulators on the next step; :meth:`step_wait` collects it."""
        if self._pending:
            raise RuntimeError(f"{self.env_id}: step_async() called twice without step_wait() in between.")
        actions = np.asarray(actions)
        if not self._checked_step:
            n = self.action_space.n
            if (
                actions.shape != (self.num_envs,)
                or not np.issubdtype(actions.dtype, np.integer)
                or ((actions < 0) | (actions >= n)).any()
            ):
                raise EnvSpaceError(
                    f"Actions {actions!r} are outside the action space of environment {self.env_id!r}: "
                    f"expected {self.num_envs} integers in {self.action_space}."
                )
            self._checked_step = True
        self._venv.send(actions.astype(np.int64, copy=False))
        self._pending = True

    def step_wait(self) -> VectorStep:
        """Waits for the step that :meth:`step_async` started and returns it."""
        if not self._pending:
            raise RuntimeError(f"{self.env_id}: step_wait() called without step_async() before it.")
        obs, raw, terminated, truncated, info = self._venv.recv()
        self._pending = False
        raw = raw.astype(np.float32)
        ended = terminated | truncated
        final_obs = obs
        if ended.any():
            idx = (slice(None),) + (None,) * (obs.ndim - 1)
            final_obs = np.where(ended[idx], info["final_obs"], obs)
        lives = info["lives"]
        # A lost life (life_loss_info) lowers the counter and the game goes on; a game
        # over resets it to the starting count (never lower than before).
        if self.config.terminal_on_life_loss:
            game_over = truncated | (terminated & (lives >= self._lives))
        else:
            game_over = ended
        self._lives[:] = lives
        self._returns += raw
        self._lengths += 1
        if game_over.any():
            self._done_returns.extend(self._returns[game_over].tolist())
            self._done_lengths.extend(self._lengths[game_over].tolist())
            self._returns[game_over] = 0.0
            self._lengths[game_over] = 0
        reward = np.sign(raw) if self.config.clip_rewards else raw
        return VectorStep(obs, reward, terminated, truncated, final_obs)

    def pop_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Scores and lengths (agent steps) of the games completed since the last call."""
        out = np.asarray(self._done_returns, np.float32), np.asarray(self._done_lengths, np.int32)
        self._done_returns, self._done_lengths = [], []
        return out

    def close(self) -> None:
        self._venv.close()


def _register_all() -> None:
    for env_id in atari_ids():
        register(
            env_id,
            _factory(env_id),
            f"{env_id} preprocessed: no-op starts, frame skip 4 with max-pooling, 84x84 grayscale, 4 stacked "
            "frames, sticky actions 0.25 (env_config keys: envs.atari.AtariConfig; preprocess=False: the raw game)",
        )


_register_all()
