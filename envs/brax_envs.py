"""Brax environments, ``brax/<name>``, behind gymnax's interface, so device mode runs them.

Brax (Freeman et al., 2021, "Brax -- A Differentiable Physics Engine for Large Scale Rigid
Body Simulation") writes its environments in JAX; :class:`BraxEnv` gives one gymnax's
``reset_env`` / ``step_env`` pure functions, its spaces and its time limit, and gymnax's
``Environment.step`` adds the automatic reset (a fresh ``reset`` with its own key, so every
episode starts from its own random state). Brax's ``done`` is a natural termination (the
pendulum fell); the time limit, ``episode_length`` steps as in ``brax.envs.create``, is a
truncation, which device mode bootstraps (:func:`jaxflow.rollout.truncation.truncation_bootstrap`).

Actions are in ``[-1, 1]^A``: brax's pipelines scale them to each actuator's range.

Every key of ``env_config`` but two goes to the environment's constructor (e.g.
``ctrl_cost_weight`` for ``halfcheetah``); ``backend`` picks brax's physics pipeline and
``episode_length`` the time limit.
"""

from __future__ import annotations

import contextlib
import functools
import io
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces
from gymnax.environments.environment import Environment

from jaxflow.envs.mujoco_warnings import quiet_model_deprecations
from jaxflow.envs.registry import BRAX_PREFIX

BACKENDS = ("generalized", "mjx", "positional", "spring")
DEFAULT_BACKEND = "spring"
"""The fastest of the four on a CPU (see benchmarks/brax_backends.py); brax's own default
is ``generalized``, the most accurate of its own pipelines, and ``mjx`` is MuJoCo's."""
DEFAULT_EPISODE_LENGTH = 1000
"""``brax.envs.create``'s default, and the limit of gymnasium's MuJoCo ``-v5`` tasks."""


class BraxConfigError(ValueError):
    """An ``env_config`` value a Brax environment cannot take."""


@struct.dataclass
class BraxState:
    """Brax's own state and the steps taken in the episode (gymnax's ``time``)."""

    brax: Any
    time: jax.Array


@struct.dataclass
class BraxParams:
    """gymnax's environment parameters: the time limit (the rest is fixed at construction)."""

    max_steps_in_episode: int = DEFAULT_EPISODE_LENGTH


def brax_names() -> tuple[str, ...]:
    """The names in brax's environment registry, sorted, with any added by
    ``brax.envs.register_environment`` (brax has no public listing; ``_envs`` is its table)."""
    return tuple(sorted(_brax_envs()._envs))


def _brax_envs() -> Any:
    # mujoco.mjx prints "Failed to import warp" on import where NVIDIA Warp is absent (it is
    # optional, for GPUs): keep that out of `jaxflow list` and every run's output.
    with contextlib.redirect_stdout(io.StringIO()):
        import brax.envs
    quiet_model_deprecations()  # brax's half_cheetah.xml, as gymnasium's
    return brax.envs


def _strong(tree: Any) -> Any:
    """``tree`` without weak types. Brax's reset and step disagree on which scalars are weakly
    typed (``0.0`` vs a computed float32), so a state from one would compile the other's
    consumer a second time (the host env's step: once from reset, once from step)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(x)), tree)


class BraxEnv(Environment[BraxState, BraxParams]):
    """A brax environment as a gymnax one.

    Example:
        >>> env = BraxEnv("inverted_pendulum")                   # doctest: +SKIP
        >>> obs, state = env.reset(jax.random.PRNGKey(0))        # doctest: +SKIP
        >>> obs, state, r, terminated, truncated, info = env.step(key, state, jnp.zeros(1))  # doctest: +SKIP
    """

    def __init__(self, name: str, backend: str = DEFAULT_BACKEND, **kwargs: Any):
        super().__init__()
        if backend not in BACKENDS:
            raise BraxConfigError(
                f"brax/{name}: env_config backend={backend!r} is not a brax pipeline; allowed: {', '.join(BACKENDS)}."
            )
        try:
            self.brax_env = _brax_envs().get_environment(name, backend=backend, **kwargs)
        except TypeError as e:  # a keyword the environment's constructor does not take
            raise BraxConfigError(f"brax/{name}: env_config {sorted(kwargs)}: {e}.") from None
        self.env_name, self.backend = f"{BRAX_PREFIX}{name}", backend
        obs = jax.eval_shape(self.brax_env.reset, jax.random.PRNGKey(0)).obs
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) != 1:
            raise BraxConfigError(f"{self.env_name}: observations {obs} are not one vector; jaxflow needs one.")
        self.obs_size, self.action_size = int(obs.shape[0]), int(self.brax_env.action_size)

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def reset_env(self, key: jax.Array, params: BraxParams) -> tuple[jax.Array, BraxState]:
        del params
        s = _strong(self.brax_env.reset(key))
        return s.obs, BraxState(s, jnp.zeros((), jnp.int32))

    def step_env(
        self, key: jax.Array, state: BraxState, action: jax.Array, params: BraxParams
    ) -> tuple[jax.Array, BraxState, jax.Array, jax.Array, dict[str, Any]]:
        """One brax step (deterministic: ``key`` is unused); terminated is brax's ``done``."""
        del key, params
        s = _strong(self.brax_env.step(state.brax, action))
        return s.obs, BraxState(s, state.time + 1), s.reward, s.done > 0, {}

    def is_terminated(self, state: BraxState, params: BraxParams) -> jax.Array:
        return state.brax.done > 0

    def observation_space(self, params: BraxParams) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (self.obs_size,), jnp.float32)

    def action_space(self, params: BraxParams) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.action_size,), jnp.float32)


def make_brax(env_id: str, episode_length: int = DEFAULT_EPISODE_LENGTH, **kwargs: Any) -> tuple[BraxEnv, BraxParams]:
    """``(env, params)`` for ``brax/<name>``: ``kwargs`` (``backend`` and the environment's
    own) go to :class:`BraxEnv`, ``episode_length`` is the time limit.

    A process makes one :class:`BraxEnv` per name and settings (it holds no episode state,
    that is the ``BraxState`` pytree), so a worker's copies share one compiled step."""
    if isinstance(episode_length, bool) or not isinstance(episode_length, (int, np.integer)) or episode_length < 1:
        raise BraxConfigError(f"{env_id}: env_config episode_length must be a positive int, got {episode_length!r}.")
    name, settings = env_id[len(BRAX_PREFIX) :], tuple(sorted(kwargs.items()))
    try:
        hash(settings)
    except TypeError:  # a list or dict among the settings: this copy gets its own env
        return BraxEnv(name, **kwargs), BraxParams(int(episode_length))
    return _shared_env(name, settings), BraxParams(int(episode_length))


@functools.cache
def _shared_env(name: str, settings: tuple[tuple[str, Any], ...]) -> BraxEnv:
    return BraxEnv(name, **dict(settings))
