"""A vector of CPU environments stepped in lockstep, for rollout workers."""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium
import numpy as np

from jaxflow.envs.registry import make_copies, make_cpu


class EnvSpaceError(ValueError):
    """An environment produced an observation, or was given an action, outside its space."""


class VectorStep(NamedTuple):
    """One step of B environments.

    ``obs`` is what the policy sees next (a fresh reset observation where an
    episode ended); ``final_obs`` is the last observation of an ended episode
    (equal to ``obs`` elsewhere), which a learner needs to bootstrap truncations.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray


class EndedEpisodes(NamedTuple):
    """The episodes a vector completed since the last pop, in the order they ended: their
    returns and lengths, which env of the vector played each, and the ``info`` dict of its
    last step (None where the backend has no per-env info: ale-py's and envpool's vectors)."""

    returns: np.ndarray
    lengths: np.ndarray
    env_indices: np.ndarray
    infos: list[Any]


class EpisodeTally:
    """The running returns and lengths of a vector's ``num_envs`` episodes, and those of the
    episodes completed since the last :meth:`pop`: what every vector backend's
    ``pop_episodes`` reports (``pop_ended``: with the env and last ``info`` of each).

    Example:
        >>> tally = EpisodeTally(2)
        >>> tally.add(np.ones(2), np.array([False, True]))
        >>> tally.add(np.ones(2), np.array([True, False]))
        >>> tally.pop()
        (array([1., 2.], dtype=float32), array([1, 2], dtype=int32))
    """

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self._done_returns: list[float] = []
        self._done_lengths: list[int] = []
        self._done_envs: list[int] = []
        self._done_infos: list[Any] = []

    def restart(self) -> None:
        """Every episode starts anew (a reset of the whole vector)."""
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def add(self, reward: np.ndarray, ended: np.ndarray, counted: np.ndarray | None = None, infos: Any = None) -> None:
        """One step's rewards; the ``ended`` episodes start anew, and those of them ``counted``
        (default: all) are recorded, with their env's entry of ``infos`` (per env) where given."""
        self.returns += reward
        self.lengths += 1
        if ended.any():
            done = np.flatnonzero(ended if counted is None else counted)
            self._done_returns.extend(self.returns[done].tolist())
            self._done_lengths.extend(self.lengths[done].tolist())
            self._done_envs.extend(done.tolist())
            self._done_infos.extend(None if infos is None else infos[i] for i in done)
            self.returns[ended] = 0.0
            self.lengths[ended] = 0

    def record(self, episode_return: float, length: int, env_index: int, info: Any = None) -> None:
        """An episode env ``env_index`` counted itself (gymnasium's ``RecordEpisodeStatistics``)."""
        self._done_returns.append(episode_return)
        self._done_lengths.append(length)
        self._done_envs.append(env_index)
        self._done_infos.append(info)

    def pop(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns and lengths of the episodes completed since the last call."""
        ended = self.pop_ended()
        return ended.returns, ended.lengths

    def pop_ended(self) -> EndedEpisodes:
        """The episodes completed since the last call (of this or :meth:`pop`)."""
        out = EndedEpisodes(
            np.asarray(self._done_returns, np.float32),
            np.asarray(self._done_lengths, np.int32),
            np.asarray(self._done_envs, np.int64),
            self._done_infos,
        )
        self._done_returns, self._done_lengths, self._done_envs, self._done_infos = [], [], [], []
        return out


def _records_episodes(env: gymnasium.Env) -> bool:
    """Whether ``env``'s wrapper chain includes gymnasium's ``RecordEpisodeStatistics``."""
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.RecordEpisodeStatistics):
            return True
        env = env.env
    return False


class VectorEnv:
    """B copies of one environment with auto-reset and episode statistics.

    Example:
        >>> venv = VectorEnv("CartPole-v1", num_envs=4, seed=0)
        >>> obs = venv.reset()
        >>> step = venv.step(np.zeros(4, np.int64))
        >>> obs.shape, step.reward.shape
        ((4, 4), (4,))

    Spaces are checked on the first reset and the first step: an observation or
    action outside the declared space raises :class:`EnvSpaceError` naming the env.

    ``step`` is ``step_async`` then ``step_wait``, gymnasium's split: a caller can do its
    own work between the two. Here the envs step in ``step_wait``; in
    :class:`envs.ALEVectorEnv` the emulator threads run in between.

    Episode statistics are the env's own where it keeps them: an env wrapped in
    gymnasium's ``RecordEpisodeStatistics`` (every Atari env here) reports its episodes
    through ``info["episode"]``, which for Atari is the unclipped game score over all
    lives, even when the agent sees clipped rewards and per-life episodes. Other envs are
    counted here from the rewards and episode ends the agent sees.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        env_config: dict[str, Any] | None = None,
        worker_index: int = 0,
        incarnation: int = 0,
    ):
        self.env_id = env_id
        self.num_envs = num_envs
        self._seed = seed
        self.envs = make_copies(make_cpu, env_id, num_envs, seed, env_config, worker_index, incarnation)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self._obs_dtype = obs_dtype(self.observation_space)
        self._tally = EpisodeTally(num_envs)
        self._checked_step = False
        self._self_reporting = [_records_episodes(env) for env in self.envs]
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        obs = [env.reset(seed=self._seed + i)[0] for i, env in enumerate(self.envs)]
        for o in obs:
            self._check_obs(o, "reset()")
        self._tally.restart()
        return np.stack(obs).astype(self._obs_dtype, copy=False)

    def step(self, actions: np.ndarray) -> VectorStep:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Takes the actions of the next step; :meth:`step_wait` steps the envs with them."""
        if self._actions is not None:
            raise RuntimeError(f"{self.env_id}: step_async() called twice without step_wait() in between.")
        self._actions = actions

    def step_wait(self) -> VectorStep:
        """Steps every env with the actions given to :meth:`step_async`."""
        if self._actions is None:
            raise RuntimeError(f"{self.env_id}: step_wait() called without step_async() before it.")
        actions, self._actions = self._actions, None
        if not self._checked_step:
            for a in actions:
                self._check_action(a)
        n = self.num_envs
        next_obs: list[Any] = [None] * n  # every slot is filled below
        final_obs: list[Any] = [None] * n
        reward = np.empty(n, np.float32)
        terminated = np.empty(n, bool)
        truncated = np.empty(n, bool)
        infos: list[Any] = [None] * n
        for i, (env, a) in enumerate(zip(self.envs, actions)):
            o, r, te, tr, info = env.step(a.item() if isinstance(self.action_space, gymnasium.spaces.Discrete) else a)
            if not self._checked_step:
                self._check_obs(o, "step()")
            if self._self_reporting[i] and "episode" in info:
                self._tally.record(float(info["episode"]["r"]), int(info["episode"]["l"]), i, info)
            reward[i], terminated[i], truncated[i], infos[i] = r, te, tr, info
            final_obs[i] = o
            if te or tr:
                o, _ = env.reset()
            next_obs[i] = o
        self._checked_step = True
        ended = terminated | truncated
        self._tally.add(reward, ended, counted=ended & ~np.asarray(self._self_reporting), infos=infos)
        return VectorStep(
            np.stack(next_obs).astype(self._obs_dtype, copy=False),
            reward,
            terminated,
            truncated,
            np.stack(final_obs).astype(self._obs_dtype, copy=False),
        )

    def pop_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns and lengths of the episodes completed since the last call."""
        return self._tally.pop()

    def pop_ended(self) -> EndedEpisodes:
        """The episodes completed since the last call, with each one's env and last ``info``."""
        return self._tally.pop_ended()

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _check_obs(self, obs: Any, where: str) -> None:
        check_obs(self.env_id, self.observation_space, obs, where)

    def _check_action(self, action: Any) -> None:
        check_action(self.env_id, self.action_space, action)


def check_obs(env_id: str, space: gymnasium.Space, obs: Any, where: str, agent: str | None = None) -> None:
    """Raises :class:`EnvSpaceError` naming the env (and agent) unless ``obs`` is in ``space``."""
    of = "" if agent is None else f" for agent {agent!r}"
    shape = getattr(space, "shape", None)
    if shape is not None and np.shape(obs) != shape:
        raise EnvSpaceError(
            f"Environment {env_id!r} returned an observation of shape {np.shape(obs)}{of} "
            f"from {where}, but its observation_space is {space} (shape {shape})."
        )
    if not space.contains(np.asarray(obs, dtype=getattr(space, "dtype", None))):
        raise EnvSpaceError(
            f"Environment {env_id!r} returned an observation{of} outside its "
            f"observation_space {space} from {where}: {obs!r}"
        )


def check_action(env_id: str, space: gymnasium.Space, action: Any, agent: str | None = None) -> None:
    """Raises :class:`EnvSpaceError` naming the env (and agent) unless ``action`` is in ``space``."""
    if isinstance(space, gymnasium.spaces.Discrete):
        ok = (
            np.ndim(action) == 0
            and np.issubdtype(np.asarray(action).dtype, np.integer)
            and space.contains(np.int64(action))
        )
    else:
        ok = space.contains(np.asarray(action, dtype=space.dtype))
    if not ok:
        of = "" if agent is None else f" of agent {agent!r}"
        raise EnvSpaceError(
            f"Action {action!r}{of} is outside the action space of environment {env_id!r}: "
            f"expected an element of {space}."
        )


def obs_dtype(space: gymnasium.Space) -> np.dtype:
    """The dtype observations are stored in: uint8 images stay uint8, the rest is float32."""
    if isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8:
        return np.dtype(np.uint8)
    return np.dtype(np.float32)
