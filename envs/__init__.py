"""Environments for jaxflow: one registry over gymnasium (CPU), gymnax (JAX) and
multi-agent (PettingZoo Parallel API) ids, and task distributions for meta-RL (JAX).

Imports nothing from jaxflow or algorithms.
"""

from envs import atari  # registers the preprocessed ALE/<Game>-v5 ids
from envs import faulty as _faulty  # registers the misbehaving test envs
from envs.atari import ALEVectorEnv, AtariConfig, AtariConfigError, make_atari
from envs.multiagent import (  # also registers the multiagent/<Game>-v0 ids
    CoordinationGame,
    MultiAgentEnvError,
    MultiAgentStep,
    MultiAgentVectorEnv,
    RockPaperScissors,
)
from envs.registry import (
    GYMNAX_PREFIX,
    EnvContext,
    EnvKindError,
    UnknownEnvError,
    entry,
    list_envs,
    make,
    make_cpu,
    make_multiagent,
    register,
    register_multiagent,
)
from envs.tasks import TaskDistribution, list_task_distributions, make_task_distribution
from envs.vector import EnvSpaceError, VectorEnv, VectorStep

del _faulty

__all__ = [
    "ALEVectorEnv",
    "AtariConfig",
    "AtariConfigError",
    "CoordinationGame",
    "GYMNAX_PREFIX",
    "EnvContext",
    "EnvKindError",
    "EnvSpaceError",
    "MultiAgentEnvError",
    "MultiAgentStep",
    "MultiAgentVectorEnv",
    "RockPaperScissors",
    "TaskDistribution",
    "UnknownEnvError",
    "VectorEnv",
    "VectorStep",
    "atari",
    "entry",
    "list_envs",
    "list_task_distributions",
    "make",
    "make_atari",
    "make_cpu",
    "make_multiagent",
    "make_task_distribution",
    "register",
    "register_multiagent",
]
