"""envpool's threaded C++ vector environments (``envpool.make_gymnasium``) behind the interface
of :class:`envs.VectorEnv`: the rollout workers' backend with ``vector_env="envpool"`` for the
ids and settings :mod:`envs.envpool_config` allows. ``vector_env="auto"`` never picks it: a seed
gives other episodes with envpool than with gymnasium, so a run would depend on which extras
happen to be installed.

envpool resets an ended episode on the *next* step (its ``NEXT_STEP`` autoreset: that step
ignores the action and returns the reset observation with reward 0), while jaxflow's vector
envs reset on the same step. :meth:`EnvPoolVectorEnv.step_wait` therefore resets the envs whose
episode ended at once, through envpool's partial ``reset(env_ids)``, and returns their reset
observations as ``obs`` and the ended episodes' last ones as ``final_obs``; envpool then steps
them normally on the next step. envpool's ``terminated`` excludes its time limit, which it
reports as ``truncated`` (a CartPole-v1 episode that reaches step 500 is truncated, not
terminated).

Atari: envpool's frames match :mod:`envs.atari`'s (the first frame repeated to fill the stack)
and it draws its no-ops with its own RNG, so the backends are close, not identical. Lost lives
end episodes here while the game plays on, as :class:`envs.ALEVectorEnv` does, and rewards are
clipped here, so that ``pop_episodes`` reports whole-game, unclipped scores.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from jaxflow.envs.atari_config import ALE_PREFIX, AtariConfig
from jaxflow.envs.envpool_config import MAX_SEED, envpool_task
from jaxflow.envs.vector import EndedEpisodes, EpisodeTally, VectorStep, check_action, check_obs, obs_dtype


class EnvPoolVectorEnv:
    """envpool's threaded C++ vector of ``env_id`` behind the interface of :class:`envs.VectorEnv`.

    ``reset() -> obs``, ``step(actions) -> VectorStep`` (``step_async`` sends the actions to
    envpool's ``num_threads`` threads and returns; ``step_wait`` waits for them), same-step
    autoreset, ``pop_episodes()``, ``close()`` and the single-env spaces. Env ``i`` is seeded
    ``seed + i`` (modulo 2**31) when the pool is made; ``reset()`` restarts every episode
    without reseeding. Atari ``env_config`` keys are :class:`AtariConfig`'s.

    Example:
        >>> venv = EnvPoolVectorEnv("CartPole-v1", num_envs=4, seed=0)
        >>> venv.reset().shape, venv.step(np.zeros(4, np.int64)).reward.shape
        ((4, 4), (4,))
        >>> venv.close()
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        env_config: dict[str, Any] | None = None,
        worker_index: int = 0,
        incarnation: int = 0,
        num_threads: int = 1,
    ):
        del worker_index, incarnation  # envpool's envs take no EnvContext
        import envpool

        task, kwargs = envpool_task(env_id, env_config)
        self.env_id, self.num_envs = env_id, num_envs
        self._pool = envpool.make_gymnasium(
            task,
            num_envs=num_envs,
            batch_size=num_envs,  # synchronous: every step answers for all envs, in env order
            num_threads=max(1, num_threads),
            seed=[(seed + i) % MAX_SEED for i in range(num_envs)],
            **kwargs,
        )
        atari = env_id.startswith(ALE_PREFIX)
        self._atari = AtariConfig.from_kwargs(env_id, dict(env_config or {})) if atari else None
        self.observation_space = self._single_space(self._pool.observation_space)
        self.action_space = self._pool.action_space
        self._obs_dtype = obs_dtype(self.observation_space)
        self._env_ids = np.arange(num_envs, dtype=np.int32)
        self._lives = np.zeros(num_envs, np.int64)
        self._tally = EpisodeTally(num_envs)
        self._checked_step = False
        self._pending = False

    def _single_space(self, space: Any) -> gymnasium.Space:
        """One env's observation space, RGB Atari frames as jaxflow's ``[k, H, W, 3]``."""
        if self._atari is None or self._atari.grayscale:
            return space
        k, size = self._atari.frame_stack, self._atari.screen_size
        return gymnasium.spaces.Box(0, 255, (k, size, size, 3), np.uint8)

    def _obs(self, raw: np.ndarray) -> np.ndarray:
        """envpool's observations in jaxflow's layout and dtype."""
        if self._atari is not None and not self._atari.grayscale:
            # envpool stacks RGB frames channel-first on one axis: [B, k * 3, H, W].
            b, _, h, w = raw.shape
            return np.ascontiguousarray(raw.reshape(b, -1, 3, h, w).transpose(0, 1, 3, 4, 2))
        return raw.astype(self._obs_dtype, copy=False)

    def reset(self) -> np.ndarray:
        if self._pending:
            raise RuntimeError(f"{self.env_id}: reset() between step_async() and step_wait().")
        raw, info = self._pool.reset()
        obs = self._obs(raw)
        for o in obs:
            check_obs(self.env_id, self.observation_space, o, "reset()")
        self._lives[:] = info.get("lives", 0)
        self._tally.restart()
        return obs

    def step(self, actions: np.ndarray) -> VectorStep:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Sends the actions to envpool's threads; :meth:`step_wait` collects the step."""
        if self._pending:
            raise RuntimeError(f"{self.env_id}: step_async() called twice without step_wait() in between.")
        actions = np.asarray(actions)
        if not self._checked_step:
            if len(actions) != self.num_envs:
                raise ValueError(f"{self.env_id}: {len(actions)} actions for {self.num_envs} envs.")
            for a in actions:
                check_action(self.env_id, self.action_space, a)
        self._pool.send(actions)
        self._pending = True

    def step_wait(self) -> VectorStep:
        """Waits for the step :meth:`step_async` started, resets the envs whose episode ended
        (same-step autoreset) and returns the step."""
        if not self._pending:
            raise RuntimeError(f"{self.env_id}: step_wait() called without step_async() before it.")
        raw, reward, terminated, truncated, info = self._pool.recv()
        self._pending = False
        if not np.array_equal(info["env_id"], self._env_ids):  # synchronous mode's promise
            raise RuntimeError(f"{self.env_id}: envpool answered for envs {info['env_id']}, not all in order.")
        final_obs = obs = self._obs(raw)
        if not self._checked_step:
            for o in obs:
                check_obs(self.env_id, self.observation_space, o, "step()")
            self._checked_step = True
        ended = terminated | truncated
        lives = info.get("lives")
        if ended.any():
            obs, lives = self._reset_ended(obs, lives, ended)
        if lives is not None:  # Atari
            if self._atari is not None and self._atari.terminal_on_life_loss:
                terminated = terminated | (~ended & (lives < self._lives))  # the game plays on
            self._lives[:] = lives
        raw_reward = reward.astype(np.float32)
        self._tally.add(raw_reward, ended)
        clip = self._atari is not None and self._atari.clip_rewards
        return VectorStep(obs, np.sign(raw_reward) if clip else raw_reward, terminated, truncated, final_obs)

    def _reset_ended(
        self, obs: np.ndarray, lives: np.ndarray | None, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``obs`` (and Atari ``lives``) with the ended envs' entries replaced by those of
        their reset, which envpool does now instead of on the next step."""
        reset_raw, reset_info = self._pool.reset(np.flatnonzero(ended).astype(np.int32))
        ids = reset_info["env_id"]
        obs = obs.copy()  # the step's own array stays the ended episodes' final_obs
        obs[ids] = self._obs(reset_raw)
        if lives is not None:
            lives = lives.copy()
            lives[ids] = reset_info["lives"]
        return obs, lives

    def pop_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns and lengths of the episodes (for Atari: games, over all lives, unclipped)
        completed since the last call."""
        return self._tally.pop()

    def pop_ended(self) -> EndedEpisodes:
        """What :meth:`pop_episodes` reports, with each episode's env (no ``info``: None)."""
        return self._tally.pop_ended()

    def close(self) -> None:
        self._pool.close()
