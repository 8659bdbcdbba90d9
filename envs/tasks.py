"""Task distributions for meta-reinforcement learning: families of JAX environments that
differ in one parameter, drawn per task.

Each distribution is a gymnax-style environment (pure ``reset_env`` / ``step_env``, so
rollouts can be ``vmap``-ed over tasks and episodes and ``jit``-ted) plus a sampler of its
env params: ``sample_tasks(key, n)`` returns one params pytree whose leaves have a leading
axis of ``n`` tasks. The task is never in the observation; an agent must infer it from
rewards, which is what adaptation (e.g. MAML, Finn et al., 2017, "Model-Agnostic
Meta-Learning for Fast Adaptation of Deep Networks") is for.

Ids:

* ``"tasks/PointNavigation-v0"`` -- the 2-D navigation problem of Finn et al. (2017),
  Section 5.3, with discrete moves: a point starts at the origin, 5 actions (stay, +x, -x,
  +y, -y) move it by ``step_size``; the reward is ``-||position - goal||`` after the move;
  20 steps per episode; goals uniform in the square ``[-goal_range, goal_range]^2``
  (``goal_range = 0.5``). The observation is the position.
* ``"tasks/CartPoleLengths-v0"`` -- gymnax's CartPole-v1 with the pole's half-length drawn
  uniformly from ``[min_length, max_length]`` (``[0.25, 1.0]``; CartPole-v1 itself has
  0.5), at most 200 steps per episode.

Imports nothing from jaxflow.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

import chex
import gymnax
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxflow.envs.registry import UnknownEnvError

Array = jax.Array

TASKS_PREFIX = "tasks/"


@struct.dataclass
class PointState(environment.EnvState):
    position: Array
    time: int


@struct.dataclass
class PointParams(environment.EnvParams):
    goal: Array = dataclasses.field(default_factory=lambda: jnp.zeros(2, jnp.float32))
    """The task: where the point should go."""
    step_size: float = 0.1
    max_steps_in_episode: int = 20


# Displacement of each action, in units of step_size: stay, +x, -x, +y, -y.
_MOVES = jnp.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], jnp.float32)


class PointNavigation(environment.Environment[PointState, PointParams]):
    """A point in the plane moved by discrete steps towards an unobserved goal (gymnax API).

    ``step_env`` never terminates; gymnax's ``step`` truncates at ``max_steps_in_episode``.
    """

    @property
    def default_params(self) -> PointParams:
        return PointParams()

    def step_env(self, key: Array, state: PointState, action: int | Array, params: PointParams):
        del key
        position = state.position + params.step_size * _MOVES[action]
        reward = -jnp.linalg.norm(position - params.goal)
        state = PointState(position=position, time=state.time + 1)
        return self.get_obs(state), state, reward, jnp.array(False), {}

    def reset_env(self, key: Array, params: PointParams) -> tuple[Array, PointState]:
        del key, params
        state = PointState(position=jnp.zeros(2, jnp.float32), time=0)
        return self.get_obs(state), state

    def get_obs(self, state: PointState, params: PointParams | None = None, key: Array | None = None) -> Array:
        return state.position

    def is_terminated(self, state: PointState, params: PointParams) -> Array:
        return jnp.array(False)

    @property
    def name(self) -> str:
        return "PointNavigation-v0"

    @property
    def num_actions(self) -> int:
        return len(_MOVES)

    def action_space(self, params: PointParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(len(_MOVES))

    def observation_space(self, params: PointParams) -> spaces.Box:
        # Unbounded: the point may walk off in any direction within its horizon.
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class TaskDistribution:
    """A family of tasks: one gymnax-style ``env`` and a sampler of its params.

    ``sample(key, n, default_params) -> params`` returns params with a leading task axis
    ``n``; ``horizon`` is the episode length a meta-learner rolls out (episodes may
    terminate earlier). Compared and hashed by identity (its params hold arrays).
    """

    id: str
    env: Any
    default_params: Any
    sample: Callable[[Array, int, Any], Any]
    horizon: int

    def sample_tasks(self, key: Array, n: int) -> Any:
        """Params of ``n`` tasks: every leaf with a leading axis ``n``."""
        tasks = self.sample(key, n, self.default_params)
        chex.assert_tree_shape_prefix(tasks, (n,))
        return tasks

    @property
    def num_actions(self) -> int:
        return int(self.env.num_actions)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.env.observation_space(self.default_params).shape)


def _stack(params: Any, n: int) -> Any:
    """``n`` copies of ``params`` along a new leading axis (the fields a task does not vary)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (n,) + jnp.shape(x)), params)


def point_navigation(step_size: float = 0.1, goal_range: float = 0.5, horizon: int = 20) -> TaskDistribution:
    """PointNavigation tasks: goals uniform in ``[-goal_range, goal_range]^2``."""
    if not (step_size > 0 and goal_range > 0 and horizon > 0):
        raise ValueError(
            f"step_size, goal_range and horizon must be positive, got {step_size}, {goal_range}, {horizon}."
        )

    def sample(key: Array, n: int, default: PointParams) -> PointParams:
        goals = jax.random.uniform(key, (n, 2), jnp.float32, -goal_range, goal_range)
        return _stack(default, n).replace(goal=goals)

    params = PointParams(step_size=step_size, max_steps_in_episode=horizon)
    return TaskDistribution(TASKS_PREFIX + "PointNavigation-v0", PointNavigation(), params, sample, horizon)


def cartpole_lengths(min_length: float = 0.25, max_length: float = 1.0, horizon: int = 200) -> TaskDistribution:
    """CartPole-v1 tasks: pole half-lengths uniform in ``[min_length, max_length]``."""
    if not (0 < min_length <= max_length and horizon > 0):
        raise ValueError(
            f"need 0 < min_length <= max_length and horizon > 0, got {min_length}, {max_length}, {horizon}."
        )
    env, default = gymnax.make("CartPole-v1")

    def sample(key: Array, n: int, default: Any) -> Any:
        length = jax.random.uniform(key, (n,), jnp.float32, min_length, max_length)
        # The dynamics read polemass_length too, which must follow the length.
        return _stack(default, n).replace(length=length, polemass_length=default.masspole * length)

    params = default.replace(max_steps_in_episode=horizon)
    return TaskDistribution(TASKS_PREFIX + "CartPoleLengths-v0", env, params, sample, horizon)


_DISTRIBUTIONS: dict[str, Callable[..., TaskDistribution]] = {
    TASKS_PREFIX + "PointNavigation-v0": point_navigation,
    TASKS_PREFIX + "CartPoleLengths-v0": cartpole_lengths,
}


def list_task_distributions() -> list[str]:
    """Ids of the task distributions, sorted."""
    return sorted(_DISTRIBUTIONS)


def make_task_distribution(task_id: str, **kwargs: Any) -> TaskDistribution:
    """The task distribution ``task_id``; ``kwargs`` go to its constructor (e.g. ``horizon``).

    Raises :class:`~envs.registry.UnknownEnvError` (a ``KeyError``) naming the closest ids
    for an unknown one.
    """
    factory = _DISTRIBUTIONS.get(task_id)
    if factory is None:
        close = difflib.get_close_matches(task_id, list(_DISTRIBUTIONS), n=3, cutoff=0.5)
        hint = f" Did you mean {close}?" if close else ""
        raise UnknownEnvError(
            f"Unknown task distribution {task_id!r}.{hint} Available: {', '.join(list_task_distributions())}."
        )
    return factory(**kwargs)
