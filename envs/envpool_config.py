"""Which ids and ``env_config`` settings envpool serves for jaxflow (``vector_env="envpool"``),
and envpool's task and ``make`` keywords for them;
what it cannot match is refused in one line (:class:`EnvPoolConfigError`), before any worker
starts. :mod:`envs.envpool_vector` steps the pools. envpool itself is imported only where a
pool's spec is asked for.

Atari settings map to envpool's one to one (frame skip with max-pooling of a step's last two
frames, INTER_AREA resize, frame stack, 1 to ``noop_max`` no-ops at a reset, sticky actions,
action set, the frame limit as agent steps); envpool's FIRE press at a reset, its
``episodic_life`` (which restarts the game at an explicit reset) and its reward clipping stay
off: the adapter ends lives and clips rewards itself, as :class:`envs.ALEVectorEnv` does.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import gymnasium

from jaxflow.envs.atari_config import ALE_PREFIX, AtariConfig, AtariConfigError, atari_ids
from jaxflow.envs.options import MAKE_OPTIONS

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
        >>> envpool_task("CartPole-v1", {"max_episode_steps": 200})
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

    # The entry points of ENVPOOL_IDS are gymnasium's "module:Class" strings.
    creator = gymnasium.envs.registration.load_env_creator(str(gymnasium.spec(env_id).entry_point))
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
