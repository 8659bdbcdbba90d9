"""envpool's threaded C++ vector environments (``envpool.make_gymnasium``) behind the interface
of :class:`envs.VectorEnv`: the rollout workers' backend with ``vector_env="envpool"`` for the
ids in :data:`ENVPOOL_IDS` and the preprocessed ``ALE/<Game>-v5`` games.

envpool resets an ended episode on the *next* step (its ``NEXT_STEP`` autoreset: that step
ignores the action and returns the reset observation with reward 0), while jaxflow's vector
envs reset on the same step. :meth:`EnvPoolVectorEnv.step_wait` therefore resets the envs whose
episode ended at once, through envpool's partial ``reset(env_ids)``, and returns their reset
observations as ``obs`` and the ended episodes' last ones as ``final_obs``; envpool then steps
them normally on the next step. envpool's ``terminated`` excludes its time limit, which it
reports as ``truncated`` (a CartPole-v1 episode that reaches step 500 is truncated, not
terminated).

Atari: envpool's frames match :mod:`envs.atari`'s (max-pooling of a step's last two frames,
INTER_AREA resize, the first frame repeated to fill the stack) and it draws 1 to ``noop_max``
no-ops at a reset, as jaxflow does; its own RNG draws them, so the backends are close, not
identical. Lost lives are ended here, as :class:`envs.ALEVectorEnv` does (envpool's
``episodic_life`` restarts the game at an explicit reset), and rewards are clipped here, so
that ``pop_episodes`` reports whole-game, unclipped scores. Settings envpool cannot match
are refused (:func:`envpool_task`).
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import gymnasium
import numpy as np

from jaxflow.envs.atari_config import ALE_PREFIX, AtariConfig, AtariConfigError, atari_ids
from jaxflow.envs.options import MAKE_OPTIONS
from jaxflow.envs.vector import VectorStep, check_action, check_obs, obs_dtype

ENVPOOL_IDS = frozenset(
    ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]
    + [
        f"{name}-v5"
        for name in (
            "Ant HalfCheetah Hopper Humanoid HumanoidStandup InvertedDoublePendulum "
            "InvertedPendulum Pusher Reacher Swimmer Walker2d"
        ).split()
    ]
)
"""The gymnasium ids envpool runs under the same name, with the same observation shape, action
space and time limit (checked against gymnasium by the tests); the ALE games come on top."""

POOL_SETTINGS = frozenset(
    "num_envs batch_size num_threads max_num_players thread_affinity_offset base_path seed env_seed "
    "gym_reset_return_info xml_file".split()
)
"""envpool config keys that set up the pool, not the task, so never an ``env_config`` key
(``xml_file``: envpool reads it inside its own assets, gymnasium from a path)."""

MAX_SEED = 2**31
"""envpool's seeds are int32: env ``i``'s seed ``seed + i`` is taken modulo this."""

MIN_FRAME_SKIP = 2
"""envpool max-pools the last two frames of a step; with one frame per step it pools that
frame with a stale one (jaxflow's preprocessing with the frame alone)."""


class EnvPoolConfigError(ValueError):
    """An id, or an ``env_config`` setting, that ``vector_env="envpool"`` cannot run."""


def envpool_installed() -> bool:
    """Whether the optional envpool package is installed (``pip install 'jaxflow-rl[envpool]'``)."""
    return importlib.util.find_spec("envpool") is not None


def envpool_task(env_id: str, env_config: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """envpool's task id and ``make`` keywords for ``env_id`` with ``env_config``; raises
    :class:`EnvPoolConfigError` naming the env and what envpool allows.

    Example:
        >>> envpool_task("CartPole-v1", {"max_episode_steps": 200})  # doctest: +SKIP
        ('CartPole-v1', {'max_episode_steps': 200})
    """
    if not envpool_installed():
        raise EnvPoolConfigError(
            f"vector_env='envpool' needs envpool for {env_id!r}: pip install 'jaxflow-rl[envpool]'."
        )
    config = dict(env_config or {})
    if env_id.startswith(ALE_PREFIX) and env_id in atari_ids():
        return _atari_task(env_id, config)
    if env_id not in ENVPOOL_IDS:
        raise EnvPoolConfigError(
            f"vector_env='envpool' runs {', '.join(sorted(ENVPOOL_IDS))} and the ALE/<Game>-v5 games, "
            f"not {env_id!r}; use vector_env='python'."
        )
    allowed = shared_options(env_id)
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise EnvPoolConfigError(
            f"vector_env='envpool' cannot set env_config key(s) {unknown} of {env_id!r}; "
            f"envpool takes {sorted(allowed)} (use vector_env='python' for the others)."
        )
    return env_id, config


def shared_options(env_id: str) -> set[str]:
    """The ``env_config`` keys of an :data:`ENVPOOL_IDS` id that envpool takes too: the
    gymnasium env's parameters (and ``max_episode_steps``) that envpool's config has under the
    same name."""
    import envpool

    creator = gymnasium.envs.registration.load_env_creator(gymnasium.spec(env_id).entry_point)
    # The MuJoCo envs also take **kwargs (passed to MujocoEnv): only the named ones are compared.
    params = inspect.signature(creator).parameters.values()
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    pool = set(envpool.make_spec(env_id).config._fields) - POOL_SETTINGS
    return pool & (named | set(MAKE_OPTIONS))


def _atari_task(env_id: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """envpool's task and settings for a preprocessed ``ALE/<Game>-v5`` game; settings it
    cannot match are refused, each in one line naming it."""
    import envpool

    try:
        config = AtariConfig.from_kwargs(env_id, kwargs)
    except AtariConfigError as e:
        raise EnvPoolConfigError(str(e)) from None
    refused = {
        "preprocess": (not config.preprocess, "envpool always preprocesses"),
        "noop_max": (config.noop_max < 1, "envpool plays 1 to noop_max no-ops at every reset"),
        "frame_skip": (config.frame_skip < MIN_FRAME_SKIP, f"envpool needs at least {MIN_FRAME_SKIP} (max-pooling)"),
        "max_num_frames_per_episode": (
            config.max_num_frames_per_episode % config.frame_skip != 0,
            f"envpool limits agent steps, so it must be a multiple of frame_skip={config.frame_skip}",
        ),
    }
    for name, (bad, why) in refused.items():
        if bad:
            raise EnvPoolConfigError(
                f"vector_env='envpool' cannot run {env_id!r} with {name}={getattr(config, name)!r}: {why}."
            )
    task = env_id.removeprefix(ALE_PREFIX)
    if task not in envpool.list_all_envs():
        raise EnvPoolConfigError(f"vector_env='envpool': envpool has no ROM for {env_id!r}; use vector_env='ale'.")
    return task, dict(
        stack_num=config.frame_stack,
        frame_skip=config.frame_skip,
        noop_max=config.noop_max,
        img_height=config.screen_size,
        img_width=config.screen_size,
        gray_scale=config.grayscale,
        repeat_action_probability=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        max_episode_steps=config.max_num_frames_per_episode // config.frame_skip,
        use_inter_area_resize=True,
        use_fire_reset=False,  # jaxflow's preprocessing presses no FIRE at a reset
        episodic_life=False,  # lives are ended here: see the module's docstring
        reward_clip=False,  # clipped here, so that episode scores stay unclipped
    )


def check_envpool(env_id: str, env_config: dict[str, Any] | None = None) -> None:
    """Raises :class:`EnvPoolConfigError` in one line unless ``vector_env="envpool"`` runs
    ``env_id`` with ``env_config``: an id and keys it serves (:func:`envpool_task`) and values
    envpool's own config accepts."""
    import envpool

    task, kwargs = envpool_task(env_id, env_config)
    try:
        envpool.make_spec(task, **kwargs)
    except (AssertionError, RuntimeError, TypeError, ValueError) as e:
        defaults = envpool.make_spec(task).config
        types = {k: type(getattr(defaults, k)).__name__ for k in kwargs if hasattr(defaults, k)}
        # pybind's TypeError lists every constructor signature over many lines: the types say it.
        why = "a value of another type" if isinstance(e, TypeError) else (str(e).strip().splitlines() or [""])[0]
        raise EnvPoolConfigError(
            f"envpool refuses {env_id!r} with env_config {env_config} ({why}); the types it takes: {types}."
        ) from None


class EnvPoolVectorEnv:
    """envpool's threaded C++ vector of ``env_id`` behind the interface of :class:`envs.VectorEnv`.

    ``reset() -> obs``, ``step(actions) -> VectorStep`` (``step_async`` sends the actions to
    envpool's ``num_threads`` threads and returns; ``step_wait`` waits for them), same-step
    autoreset, ``pop_episodes()``, ``close()`` and the single-env spaces. Env ``i`` is seeded
    ``seed + i`` (modulo 2**31) when the pool is made; ``reset()`` restarts every episode
    without reseeding. Atari ``env_config`` keys are :class:`AtariConfig`'s.

    Example:
        >>> venv = EnvPoolVectorEnv("CartPole-v1", num_envs=4, seed=0)  # doctest: +SKIP
        >>> venv.reset().shape, venv.step(np.zeros(4, np.int64)).reward.shape  # doctest: +SKIP
        ((4, 4), (4,))
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
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._done_returns: list[float] = []
        self._done_lengths: list[int] = []
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
        self._returns[:] = 0.0
        self._lengths[:] = 0
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
        if self._atari is not None and self._atari.terminal_on_life_loss:
            terminated = terminated | (~ended & (lives < self._lives))  # the game plays on
        if lives is not None:
            self._lives[:] = lives
        raw_reward = reward.astype(np.float32)
        self._count(raw_reward, ended)
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

    def _count(self, raw_reward: np.ndarray, ended: np.ndarray) -> None:
        """Adds a step to the episode statistics; an ended episode's return and length are kept."""
        self._returns += raw_reward
        self._lengths += 1
        if ended.any():
            self._done_returns.extend(self._returns[ended].tolist())
            self._done_lengths.extend(self._lengths[ended].tolist())
            self._returns[ended] = 0.0
            self._lengths[ended] = 0

    def pop_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns and lengths of the episodes (for Atari: games, over all lives, unclipped)
        completed since the last call."""
        out = np.asarray(self._done_returns, np.float32), np.asarray(self._done_lengths, np.int32)
        self._done_returns, self._done_lengths = [], []
        return out

    def close(self) -> None:
        self._pool.close()
