"""Environments for jaxflow: one registry over gymnasium (CPU) and gymnax (JAX) ids.

Imports nothing from jaxflow or algorithms.
"""

from envs import atari  # registers the preprocessed ALE/<Game>-v5 ids
from envs import faulty as _faulty  # registers the misbehaving test envs
from envs.atari import ALEVectorEnv, AtariConfig, AtariConfigError, make_atari
from envs.registry import (
    GYMNAX_PREFIX,
    EnvContext,
    UnknownEnvError,
    entry,
    list_envs,
    make,
    make_cpu,
    register,
)
from envs.vector import EnvSpaceError, VectorEnv, VectorStep

del _faulty

__all__ = [
    "ALEVectorEnv",
    "AtariConfig",
    "AtariConfigError",
    "GYMNAX_PREFIX",
    "EnvContext",
    "EnvSpaceError",
    "UnknownEnvError",
    "VectorEnv",
    "VectorStep",
    "atari",
    "entry",
    "list_envs",
    "make",
    "make_atari",
    "make_cpu",
    "register",
]
