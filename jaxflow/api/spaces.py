"""Which environments an algorithm can act in: its spaces checked before anything starts."""

from __future__ import annotations

from typing import Any

import gymnasium

from jaxflow import envs
from jaxflow.api.registry import algorithms_for_space
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.config.fields import ConfigError, require
from jaxflow.policies.distributions import distribution_for
from jaxflow.rollout.stepping import vector_backend


def env_spaces(config: Any, spec: AlgorithmSpec) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The observation and action spaces of ``config.env`` (checked by :func:`check_spaces`)."""
    try:
        envs.check_env_config(config.env, config.env_config)
        if vector_backend(config) == "envpool":  # refused here, not in every Ray worker
            envs.check_envpool(config.env, config.env_config)
        env = envs.make_cpu(config.env, **config.env_config)
    except (
        envs.BraxConfigError,
        envs.EnvOptionError,
        envs.EnvPoolConfigError,
        envs.JaxLibraryConfigError,
    ) as e:  # a bad backend or episode_length: one line, exit status 2 in the CLI
        raise ConfigError(str(e)) from None
    spaces = env.observation_space, env.action_space
    env.close()
    require(
        not (isinstance(spaces[0], envs.MaskedBox) and config.rollout.normalize_observations),
        f"Environment {config.env!r} gives an action_mask, which normalize_observations would rescale; "
        "set normalize_observations=false for it.",
    )
    return check_spaces(spec, config.env, *spaces)


def check_spaces(
    spec: AlgorithmSpec, env_id: str, obs_space: gymnasium.Space, action_space: gymnasium.Space
) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The spaces, if ``spec``'s algorithm acts in the action space (one of its
    ``action_spaces``, and a space a distribution exists for) and the observations are a Box
    (:func:`check_observation_space`); else a :class:`ConfigError` naming the algorithm, the
    env, the space and the algorithms that can."""
    kind = type(action_space).__name__
    if kind not in spec.action_spaces:
        able = algorithms_for_space(kind)
        raise ConfigError(
            f"{spec.name} cannot act in environment {env_id!r}: its action space is {action_space}, and "
            f"{spec.name} supports {', '.join(spec.action_spaces)}. "
            f"Algorithms for {kind} action spaces: {', '.join(able) or 'none'}."
        )
    try:
        distribution_for(action_space)
    except TypeError as e:
        raise ConfigError(f"Environment {env_id!r}: {e}.") from None
    check_observation_space(env_id, obs_space)
    if isinstance(obs_space, envs.MaskedBox):
        check_action_mask(env_id, obs_space, action_space)
    return obs_space, action_space


def check_action_mask(env_id: str, obs_space: envs.MaskedBox, action_space: gymnasium.Space) -> None:
    """Raises a one-line :class:`ConfigError` naming the env unless its ``action_mask`` masks a
    ``Discrete(n)`` action space with one entry per action: a ``MultiBinary(n)`` or a ``Box``
    of shape ``(n,)``. Masks of other action spaces (``MultiDiscrete``, ``Box``) are not supported."""
    mask = obs_space.mask_space
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise ConfigError(
            f"Environment {env_id!r} gives an action_mask, which jaxflow applies to Discrete action spaces "
            f"only; its action space is {action_space}."
        )
    n = int(action_space.n)
    if not (isinstance(mask, gymnasium.spaces.MultiBinary | gymnasium.spaces.Box) and mask.shape == (n,)):
        raise ConfigError(
            f"Environment {env_id!r} gives an action_mask {mask}; its action space {action_space} needs "
            f"a MultiBinary({n}) or a Box of shape ({n},), one entry per action (1: legal)."
        )


def check_observation_space(env_id: str, obs_space: gymnasium.Space) -> None:
    """Raises a one-line :class:`ConfigError` naming the env and the space unless the
    observations are a Box. ``envs.make_cpu`` flattens every other space it can (Discrete,
    MultiDiscrete, MultiBinary, Tuple, Dict), so a gymnasium env reaches here with a Box or
    with a space that cannot be flattened; a flattenable one arrives unflattened only from an
    env ``make_cpu`` does not flatten (gymnax, multi-agent)."""
    if isinstance(obs_space, gymnasium.spaces.Box):
        return
    if not envs.is_flattenable(obs_space):
        raise ConfigError(
            f"Environment {env_id!r} has observation space {obs_space}, which cannot be flattened to a vector: "
            f"jaxflow trains on Box observations and on Discrete, MultiDiscrete, MultiBinary, Tuple and Dict "
            f"ones (flattened, Discrete one-hot)."
        )
    raise ConfigError(
        f"Environment {env_id!r} has observation space {obs_space}, which is flattened only for gymnasium envs "
        f"(envs.make_cpu); gymnax and multi-agent envs need Box observations."
    )
