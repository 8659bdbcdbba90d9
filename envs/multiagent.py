"""Multi-agent environments: PettingZoo's Parallel API, and a vector of them for rollout workers.

Users write (or bring) a ``pettingzoo.ParallelEnv`` and register it with
``envs.register_multiagent``; rollout workers step B copies of it through
:class:`MultiAgentVectorEnv`, which speaks numpy arrays keyed by agent.

Three small built-in games with a known optimum serve as tests and first examples (in
:mod:`envs.multiagent_games` and :mod:`envs.rendezvous`, registered when this module is imported):

* ``"multiagent/Coordination-v0"`` -- :class:`CoordinationGame` (cooperative, team reward).
* ``"multiagent/RockPaperScissors-v0"`` -- :class:`RockPaperScissors` (competitive, zero-sum).
* ``"multiagent/Rendezvous-v0"`` -- :class:`Rendezvous` (cooperative, continuous ``Box`` actions).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium
import numpy as np

from jaxflow.envs.multiagent_games import AGENTS, CoordinationGame, RockPaperScissors
from jaxflow.envs.registry import make_copies, make_multiagent
from jaxflow.envs.rendezvous import Rendezvous
from jaxflow.envs.vector import check_action, check_obs, obs_dtype

__all__ = [
    "AGENTS",
    "CoordinationGame",
    "MultiAgentEnvError",
    "MultiAgentStep",
    "MultiAgentVectorEnv",
    "Rendezvous",
    "RockPaperScissors",
]


class MultiAgentEnvError(ValueError):
    """A multi-agent environment, or the actions given to it, broke a rule :class:`MultiAgentVectorEnv` relies on."""


class MultiAgentStep(NamedTuple):
    """One step of B multi-agent environments; each field is a dict by agent of ``[B, ...]`` arrays.

    As in :class:`envs.vector.VectorStep`, ``obs`` is what the policies see next (a fresh
    reset observation where an episode ended) and ``final_obs`` the ended episode's last
    observation (equal to ``obs`` elsewhere), for bootstrapping truncations.
    """

    obs: dict[str, np.ndarray]
    reward: dict[str, np.ndarray]
    terminated: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    final_obs: dict[str, np.ndarray]


class MultiAgentVectorEnv:
    """B copies of one multi-agent (PettingZoo Parallel API) environment, with auto-reset.

    Example:
        >>> venv = MultiAgentVectorEnv("multiagent/Coordination-v0", num_envs=4, seed=0)
        >>> obs = venv.reset()
        >>> step = venv.step({a: np.zeros(4, np.int64) for a in venv.agents})
        >>> obs["agent_0"].shape, step.reward["agent_1"].shape
        ((4, 4), (4,))

    An episode ends when the env's ``agents`` list empties. Every agent must be present
    from reset to the end of the episode: an env that removes only some of its agents (or
    ends without flagging its agents terminated or truncated) raises
    :class:`MultiAgentEnvError`. Spaces are checked on the first reset and the first step,
    as in :class:`envs.vector.VectorEnv`: a mismatch raises :class:`EnvSpaceError` naming
    the env, the agent and the expected space.
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
        self.envs = make_copies(make_multiagent, env_id, num_envs, seed, env_config, worker_index, incarnation)
        self.agents: list[str] = list(self.envs[0].possible_agents)
        self.observation_spaces = {a: self.envs[0].observation_space(a) for a in self.agents}
        self.action_spaces = {a: self.envs[0].action_space(a) for a in self.agents}
        self._obs_dtypes = {a: obs_dtype(s) for a, s in self.observation_spaces.items()}
        self._returns = {a: np.zeros(num_envs, np.float64) for a in self.agents}
        self._lengths = np.zeros(num_envs, np.int64)
        self._done_returns: dict[str, list[float]] = {a: [] for a in self.agents}
        self._done_lengths: list[int] = []
        self._checked_step = False

    def reset(self) -> dict[str, np.ndarray]:
        obs = [self._reset_one(i, self._seed + i) for i in range(self.num_envs)]
        for o in obs:
            for agent in self.agents:
                self._check_obs(agent, o[agent], "reset()")
        for r in self._returns.values():
            r[:] = 0.0
        self._lengths[:] = 0
        return self._stack(obs)

    def step(self, actions: dict[str, np.ndarray]) -> MultiAgentStep:
        if set(actions) != set(self.agents) or any(len(actions[a]) != self.num_envs for a in self.agents):
            raise MultiAgentEnvError(
                f"Environment {self.env_id!r} needs one action per copy ({self.num_envs}) for each of the agents "
                f"{self.agents}, got { ({a: np.shape(v) for a, v in actions.items()}) }."
            )
        if not self._checked_step:
            for agent in self.agents:
                for a in actions[agent]:
                    self._check_action(agent, a)
        n = self.num_envs
        next_obs: list[Any] = [None] * n
        final_obs: list[Any] = [None] * n
        reward = {a: np.empty(n, np.float32) for a in self.agents}
        terminated = {a: np.empty(n, bool) for a in self.agents}
        truncated = {a: np.empty(n, bool) for a in self.agents}
        ended = np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            o, r, te, tr, _ = env.step({a: self._env_action(a, actions[a][i]) for a in self.agents})
            self._require_agents(i, (("observations", o), ("rewards", r), ("terminations", te), ("truncations", tr)))
            if not self._checked_step:
                for agent in self.agents:
                    self._check_obs(agent, o[agent], "step()")
            for agent in self.agents:
                reward[agent][i], terminated[agent][i], truncated[agent][i] = r[agent], te[agent], tr[agent]
            ended[i] = self._episode_ended(i, te, tr)
            final_obs[i] = o
            next_obs[i] = self._reset_one(i, None) if ended[i] else o
        self._checked_step = True
        self._lengths += 1
        for agent in self.agents:
            self._returns[agent] += reward[agent]
        if ended.any():
            for agent in self.agents:
                self._done_returns[agent].extend(self._returns[agent][ended].tolist())
                self._returns[agent][ended] = 0.0
            self._done_lengths.extend(self._lengths[ended].tolist())
            self._lengths[ended] = 0
        return MultiAgentStep(self._stack(next_obs), reward, terminated, truncated, self._stack(final_obs))

    def pop_episodes(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per agent, the returns and lengths of the episodes completed since the last call."""
        lengths = np.asarray(self._done_lengths, np.int32)
        out = {a: (np.asarray(self._done_returns[a], np.float32), lengths) for a in self.agents}
        self._done_returns = {a: [] for a in self.agents}
        self._done_lengths = []
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _reset_one(self, i: int, seed: int | None) -> dict[str, Any]:
        obs, _ = self.envs[i].reset(seed=seed)
        if set(self.envs[i].agents) != set(self.agents):
            raise MultiAgentEnvError(
                f"Environment {self.env_id!r} (copy {i}) started an episode with agents "
                f"{sorted(self.envs[i].agents)}, but MultiAgentVectorEnv needs every agent of "
                f"possible_agents {self.agents} in every episode."
            )
        self._require_agents(i, (("observations", obs),))
        return obs

    def _episode_ended(self, i: int, te: dict[str, bool], tr: dict[str, bool]) -> bool:
        """Whether copy ``i``'s episode ended, after checking that all its agents ended together."""
        live = set(self.envs[i].agents)
        flagged = {a for a in self.agents if te[a] or tr[a]}
        if live == set(self.agents) and not flagged:
            return False
        if not live and flagged == set(self.agents):
            return True
        raise MultiAgentEnvError(
            f"Environment {self.env_id!r} (copy {i}) ended agents {sorted(set(self.agents) - live)} and flagged "
            f"{sorted(flagged)} terminated or truncated, while {sorted(live)} play on. MultiAgentVectorEnv "
            f"supports only environments whose agents {self.agents} all end at the same step."
        )

    def _require_agents(self, i: int, dicts: tuple[tuple[str, dict[str, Any]], ...]) -> None:
        for what, d in dicts:
            missing = [a for a in self.agents if a not in d]
            if missing:
                raise MultiAgentEnvError(
                    f"Environment {self.env_id!r} (copy {i}) returned {what} without agents {missing}."
                )

    def _env_action(self, agent: str, action: np.ndarray) -> Any:
        # Discrete spaces (and the built-in games) take Python ints, not 0-d arrays.
        return action.item() if isinstance(self.action_spaces[agent], gymnasium.spaces.Discrete) else action

    def _stack(self, obs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        return {a: np.stack([o[a] for o in obs]).astype(self._obs_dtypes[a], copy=False) for a in self.agents}

    def _check_obs(self, agent: str, obs: Any, where: str) -> None:
        check_obs(self.env_id, self.observation_spaces[agent], obs, where, agent)

    def _check_action(self, agent: str, action: Any) -> None:
        check_action(self.env_id, self.action_spaces[agent], action, agent)
