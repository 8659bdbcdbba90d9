"""ale-py's own C++ vector environment (``ale_py.vector_env.AtariVectorEnv``, threaded),
behind the interface of :class:`envs.VectorEnv`: the rollout workers' backend for the
preprocessed ``ALE/<Game>-v5`` games (:func:`runs_in_ale_vector`; ``vector_env="auto"``).

Its frames match :mod:`envs.atari`'s exactly (same max-pooling and INTER_AREA resize), but
it zero-pads the frame stack after a reset and draws its no-ops its own way, so the two
backends are close, not identical. Rollout workers step it with ``vector_env="ale"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from jaxflow.envs.atari_config import AtariConfig, AtariConfigError, ale_py, atari_ids
from jaxflow.envs.vector import EndedEpisodes, EnvSpaceError, EpisodeTally, VectorStep


def runs_in_ale_vector(env_id: str, env_config: dict[str, Any] | None = None) -> bool:
    """Whether :class:`ALEVectorEnv` steps ``env_id`` with ``env_config``: an ``ALE/<Game>-v5``
    game ale-py provides, preprocessed (rollout workers with ``vector_env="auto"`` use it then).

    Example:
        >>> runs_in_ale_vector("ALE/Pong-v5"), runs_in_ale_vector("ALE/Pong-v5", {"preprocess": False})
        (True, False)
        >>> runs_in_ale_vector("CartPole-v1")
        False
    """
    return env_id in atari_ids() and bool((env_config or {}).get("preprocess", True))


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
        self._tally = EpisodeTally(num_envs)
        self._checked_step = False
        self._pending = False

    def reset(self) -> np.ndarray:
        if self._pending:
            raise RuntimeError(f"{self.env_id}: reset() between step_async() and step_wait().")
        obs: np.ndarray  # ale-py leaves its reset()'s ObsType unbound
        obs, info = self._venv.reset(seed=self._seed)  # seeds seed, seed + 1, ... like VectorEnv
        self._lives[:] = info["lives"]
        self._tally.restart()
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
        self._tally.add(raw, game_over)
        reward = np.sign(raw) if self.config.clip_rewards else raw
        return VectorStep(obs, reward, terminated, truncated, final_obs)

    def pop_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Scores and lengths (agent steps) of the games completed since the last call."""
        return self._tally.pop()

    def pop_ended(self) -> EndedEpisodes:
        """What :meth:`pop_episodes` reports, with each episode's env (no ``info``: None)."""
        return self._tally.pop_ended()

    def close(self) -> None:
        self._venv.close()
