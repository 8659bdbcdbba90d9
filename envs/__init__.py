"""Environments for jaxflow: one registry over gymnasium (CPU, POPGym's ``popgym/<Name>-v0``
memory tasks among them), gymnax and Brax (JAX) and multi-agent (PettingZoo Parallel API) ids,
and task distributions for meta-RL (JAX).
A CPU env's observations that are not a ``Box`` come flattened to a float32 vector (a
``Dict``'s ``action_mask`` last, for masked policies).

Installed as ``jaxflow.envs``; imports nothing of the engine (jaxflow's other
sub-packages) or of ``jaxflow.algorithms``.
"""

from jaxflow.envs import atari  # registers the preprocessed ALE/<Game>-v5 ids
from jaxflow.envs.atari import ALEVectorEnv, AtariConfig, AtariConfigError, make_atari, runs_in_ale_vector
from jaxflow.envs.brax_envs import BRAX_PREFIX, BraxConfigError, BraxEnv
from jaxflow.envs.flatten import FlatObservation, flat_space, flatten_observations, is_flattenable
from jaxflow.envs.jax_libraries import JaxLibraryConfigError, LibraryEnv
from jaxflow.envs.masked_choice import MaskedChoice  # registers jaxflow/MaskedChoice-v0
from jaxflow.envs.masking import ActionMaskError, FlatMaskedObservation, MaskedBox
from jaxflow.envs.multiagent import (
    CoordinationGame,
    MultiAgentEnvError,
    MultiAgentStep,
    MultiAgentVectorEnv,
    Rendezvous,
    RockPaperScissors,
)
from jaxflow.envs.options import USER_ONLY_OPTIONS, EnvOptionError, check_env_config, check_file_env_config, env_options
from jaxflow.envs.popgym_envs import POPGYM_PREFIX, MissingPOPGymError
from jaxflow.envs.registry import (
    GYMNAX_PREFIX,
    JAX_KINDS,
    EnvContext,
    EnvKindError,
    UnknownEnvError,
    adopt,
    custom_entry,
    entry,
    list_envs,
    make,
    make_cpu,
    make_multiagent,
    register,
    register_factory,
    register_jax,
    register_multiagent,
)
from jaxflow.envs.stateless import STATELESS_CARTPOLE, StatelessCartPole  # registers jaxflow/StatelessCartPole-v1
from jaxflow.envs.tasks import TaskDistribution, list_task_distributions, make_task_distribution
from jaxflow.envs.vector import EnvSpaceError, VectorEnv, VectorStep

__all__ = [
    "BRAX_PREFIX",
    "GYMNAX_PREFIX",
    "JAX_KINDS",
    "POPGYM_PREFIX",
    "STATELESS_CARTPOLE",
    "USER_ONLY_OPTIONS",
    "ALEVectorEnv",
    "ActionMaskError",
    "AtariConfig",
    "AtariConfigError",
    "BraxConfigError",
    "BraxEnv",
    "CoordinationGame",
    "EnvContext",
    "EnvKindError",
    "EnvOptionError",
    "EnvSpaceError",
    "FlatMaskedObservation",
    "FlatObservation",
    "JaxLibraryConfigError",
    "LibraryEnv",
    "MaskedBox",
    "MaskedChoice",
    "MissingPOPGymError",
    "MultiAgentEnvError",
    "MultiAgentStep",
    "MultiAgentVectorEnv",
    "Rendezvous",
    "RockPaperScissors",
    "StatelessCartPole",
    "TaskDistribution",
    "UnknownEnvError",
    "VectorEnv",
    "VectorStep",
    "adopt",
    "atari",
    "check_env_config",
    "check_file_env_config",
    "custom_entry",
    "entry",
    "env_options",
    "flat_space",
    "flatten_observations",
    "is_flattenable",
    "list_envs",
    "list_task_distributions",
    "make",
    "make_atari",
    "make_cpu",
    "make_multiagent",
    "make_task_distribution",
    "register",
    "register_factory",
    "register_jax",
    "register_multiagent",
    "runs_in_ale_vector",
]
