"""Environments for jaxflow: one registry over gymnasium (CPU) and gymnax (JAX) ids.

Imports nothing from jaxflow or algorithms.
"""

from envs import faulty as _faulty  # registers the misbehaving test envs
from envs.registry import GYMNAX_PREFIX, EnvContext, UnknownEnvError, entry, list_envs, make, make_cpu, register
from envs.vector import EnvSpaceError, VectorEnv, VectorStep

del _faulty

__all__ = [
    "GYMNAX_PREFIX",
    "EnvContext",
    "EnvSpaceError",
    "UnknownEnvError",
    "VectorEnv",
    "VectorStep",
    "entry",
    "list_envs",
    "make",
    "make_cpu",
    "register",
]
