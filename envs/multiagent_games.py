"""Two small built-in multi-agent games with a known optimum, as tests and first examples,
registered on import:

* ``"multiagent/Coordination-v0"`` -- :class:`CoordinationGame` (cooperative, team reward).
* ``"multiagent/RockPaperScissors-v0"`` -- :class:`RockPaperScissors` (competitive, zero-sum).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np

from jaxflow.envs.two_agent import AGENTS, TwoAgentGame, ignoring_context
from jaxflow.envs.user_envs import register_multiagent


class _RepeatedTwoPlayerGame(TwoAgentGame):
    """Two agents play one simultaneous-move stage game ``episode_length`` times.

    An agent's observation is game-specific features followed by the elapsed fraction
    ``t / episode_length``, which makes the time limit observable. Subclasses define the
    stage game through ``_payoff``, ``_new_round`` and ``_features``.
    """

    def __init__(self, episode_length: int, num_actions: int, num_features: int):
        super().__init__(
            episode_length,
            lambda: gymnasium.spaces.Box(0.0, 1.0, (num_features + 1,), np.float32),
            lambda: gymnasium.spaces.Discrete(num_actions),
        )

    def _start(self) -> None:
        self._new_round(None)

    def _play(self, actions: dict[str, Any]) -> tuple[float, float]:
        a0, a1 = int(actions[AGENTS[0]]), int(actions[AGENTS[1]])
        rewards = self._payoff(a0, a1)
        self._new_round((a0, a1))
        return rewards

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


register_multiagent(
    "multiagent/Coordination-v0",
    ignoring_context(CoordinationGame),
    "Cued two-agent coordination game, team reward 1 when both play the cue; optimum = episode_length",
)
register_multiagent(
    "multiagent/RockPaperScissors-v0",
    ignoring_context(RockPaperScissors),
    "Repeated rock-paper-scissors, zero-sum; Nash value 0, always-paper vs always-rock earns episode_length",
)
