"""Multi-agent environments: PettingZoo's Parallel API, and a vector of them for rollout workers.

Users write (or bring) a ``pettingzoo.ParallelEnv`` and register it with
``envs.register_multiagent``; rollout workers step B copies of it through
:class:`MultiAgentVectorEnv`, which speaks numpy arrays keyed by agent.

Two small built-in games with a known optimum serve as tests and first examples:

* ``"multiagent/Coordination-v0"`` -- :class:`CoordinationGame` (cooperative, team reward).
* ``"multiagent/RockPaperScissors-v0"`` -- :class:`RockPaperScissors` (competitive, zero-sum).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import gymnasium
import numpy as np
from pettingzoo import ParallelEnv

from jaxflow.envs.registry import EnvContext, make_copies, make_multiagent, register_multiagent
from jaxflow.envs.vector import check_action, check_obs, obs_dtype

AGENTS = ("agent_0", "agent_1")


class MultiAgentEnvError(ValueError):
    """A multi-agent environment, or the actions given to it, broke a rule :class:`MultiAgentVectorEnv` relies on."""


class _RepeatedTwoPlayerGame(ParallelEnv):
    """Two agents play one simultaneous-move stage game ``episode_length`` times.

    The episode ends by a time limit, so it is reported as truncation (never termination)
    for both agents at once. An agent's observation is game-specific features followed by
    the elapsed fraction ``t / episode_length``, which makes the time limit observable.
    Subclasses define the stage game through ``_payoff``, ``_new_round`` and ``_features``.
    """

    def __init__(self, episode_length: int, num_actions: int, num_features: int):
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        self.episode_length = episode_length
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        # One space object per agent for the env's life: PettingZoo seeds spaces by identity.
        self.observation_spaces = {a: gymnasium.spaces.Box(0.0, 1.0, (num_features + 1,), np.float32) for a in AGENTS}
        self.action_spaces: dict[str, gymnasium.spaces.Discrete] = {
            a: gymnasium.spaces.Discrete(num_actions) for a in AGENTS
        }
        self._rng = np.random.default_rng()
        self._t = 0

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        del options  # these games have none
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._new_round(None)
        return self._observe(), {a: {} for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        if not self.agents:
            raise RuntimeError(f"{self.metadata['name']}: step() after the episode ended; call reset() first.")
        if set(actions) != set(self.agents):
            raise ValueError(f"{self.metadata['name']}: expected actions for {self.agents}, got {sorted(actions)}.")
        for agent, action in actions.items():
            if not self.action_spaces[agent].contains(action):
                raise ValueError(
                    f"{self.metadata['name']}: action {action!r} of {agent} is outside {self.action_spaces[agent]}."
                )
        a0, a1 = int(actions[AGENTS[0]]), int(actions[AGENTS[1]])
        r0, r1 = self._payoff(a0, a1)
        self._t += 1
        self._new_round((a0, a1))
        done = self._t >= self.episode_length
        out: tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]] = (
            self._observe(),
            {AGENTS[0]: r0, AGENTS[1]: r1},
            dict.fromkeys(self.agents, False),
            dict.fromkeys(self.agents, done),
            {a: {} for a in self.agents},
        )
        if done:
            self.agents = []
        return out

    def _observe(self) -> dict[str, np.ndarray]:
        time = np.array([self._t / self.episode_length], np.float32)
        return {a: np.concatenate([f, time]).astype(np.float32) for a, f in zip(AGENTS, self._features())}

    def _payoff(self, a0: int, a1: int) -> tuple[float, float]:
        """Rewards of (agent_0, agent_1) for one round."""
        raise NotImplementedError

    def _new_round(self, previous: tuple[int, int] | None) -> None:
        """Sets up the next round; ``previous`` holds the last round's actions (None after reset)."""
        raise NotImplementedError

    def _features(self) -> tuple[np.ndarray, np.ndarray]:
        """The game-specific part of (agent_0's, agent_1's) observation."""
        raise NotImplementedError


class CoordinationGame(_RepeatedTwoPlayerGame):
    """A cued pure-coordination game: both agents must pick the action shown by a shared cue.

    Each step a cue ``c`` is drawn uniformly from ``{0, ..., num_actions - 1}`` and shown to
    both agents; observation = ``one_hot(c) ++ [t / episode_length]`` (shape
    ``[num_actions + 1]``). Both agents get reward 1 when *both* play ``c``, else 0 (a team
    reward, as in cooperative matrix games used to test independent learners, e.g. Claus &
    Boutilier, "The Dynamics of Reinforcement Learning in Cooperative Multiagent Systems",
    AAAI 1998).

    Known values, per agent: the optimum (play the cue) returns ``episode_length``; two
    uniformly random policies return ``episode_length / num_actions**2`` in expectation
    (10/9 ≈ 1.11 with the defaults), a Binomial(episode_length, 1/num_actions**2) count.
    """

    metadata: ClassVar[dict] = {"name": "coordination_v0", "render_modes": []}

    def __init__(self, episode_length: int = 10, num_actions: int = 3):
        if num_actions < 2:
            raise ValueError(f"num_actions must be >= 2, got {num_actions}")
        super().__init__(episode_length, num_actions, num_features=num_actions)
        self.num_actions = num_actions
        self.cue = 0

    def _payoff(self, a0: int, a1: int) -> tuple[float, float]:
        r = 1.0 if a0 == self.cue and a1 == self.cue else 0.0
        return r, r

    def _new_round(self, previous: tuple[int, int] | None) -> None:
        del previous  # cues are independent of play
        self.cue = int(self._rng.integers(self.num_actions))

    def _features(self) -> tuple[np.ndarray, np.ndarray]:
        cue = np.eye(self.num_actions, dtype=np.float32)[self.cue]
        return cue, cue


class RockPaperScissors(_RepeatedTwoPlayerGame):
    """Repeated rock-paper-scissors, a two-player zero-sum game.

    Actions: 0 = rock, 1 = paper, 2 = scissors. Each round the winner gets +1 and the
    loser -1 (a draw gives 0 to both), so rewards always sum to 0. Observation = one-hot
    of the opponent's previous action (zeros on the first step) ``++ [t / episode_length]``,
    shape ``[4]``.

    Known values: the stage game's unique Nash equilibrium is uniform play, with value 0
    for both; against an opponent that always plays rock the best response (always paper)
    returns ``+episode_length``. Being stationary, an exploitable opponent shows up in the
    observation, so a learner can find that best response.
    """

    metadata: ClassVar[dict] = {"name": "rock_paper_scissors_v0", "render_modes": []}

    def __init__(self, episode_length: int = 10):
        super().__init__(episode_length, num_actions=3, num_features=3)
        self._previous: tuple[int, int] | None = None

    def _payoff(self, a0: int, a1: int) -> tuple[float, float]:
        # Each action beats the one before it, cyclically: paper > rock, scissors > paper, rock > scissors.
        r = {0: 0.0, 1: 1.0, 2: -1.0}[(a0 - a1) % 3]
        return r, -r

    def _new_round(self, previous: tuple[int, int] | None) -> None:
        self._previous = previous

    def _features(self) -> tuple[np.ndarray, np.ndarray]:
        if self._previous is None:
            return np.zeros(3, np.float32), np.zeros(3, np.float32)
        one_hot = np.eye(3, dtype=np.float32)
        a0, a1 = self._previous
        return one_hot[a1], one_hot[a0]


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


def _ignoring_context(game: Callable[..., ParallelEnv]) -> Callable[..., ParallelEnv]:
    def factory(context: EnvContext, **kwargs: Any) -> ParallelEnv:
        del context  # seeded through reset(seed=...), as gymnasium envs are
        return game(**kwargs)

    return factory


register_multiagent(
    "multiagent/Coordination-v0",
    _ignoring_context(CoordinationGame),
    "Cued two-agent coordination game, team reward 1 when both play the cue; optimum = episode_length",
)
register_multiagent(
    "multiagent/RockPaperScissors-v0",
    _ignoring_context(RockPaperScissors),
    "Repeated rock-paper-scissors, zero-sum; Nash value 0, always-paper vs always-rock earns episode_length",
)
