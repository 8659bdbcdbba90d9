"""Environments for jaxflow: one registry over gymnasium (CPU, POPGym's ``popgym/<Name>-v0``
memory tasks among them), gymnax and Brax (JAX) and multi-agent (PettingZoo Parallel API) ids,
and task distributions for meta-RL (JAX).
A CPU env's observations that are not a ``Box`` come flattened to a float32 vector (a
``Dict``'s ``action_mask`` last, for masked policies).

Installed as ``jaxflow.envs``; imports nothing of the engine (jaxflow's other
sub-packages) or of ``jaxflow.algorithms``. Its names that need gymnax (Brax's and the JAX
libraries' envs, StatelessCartPole, the task distributions) load on first use (PEP 562):
gymnax's import costs about 1.3 s of CPU, which every Ray rollout worker on a gymnasium env
(importing this package) would otherwise pay.
"""

import importlib
from typing import TYPE_CHECKING, Any

from jaxflow.envs import atari  # registers the preprocessed ALE/<Game>-v5 ids
from jaxflow.envs.atari import ALEVectorEnv, AtariConfig, AtariConfigError, make_atari, runs_in_ale_vector
from jaxflow.envs.envpool_config import (  # envpool itself is imported when a pool is made or checked
    ENVPOOL_IDS,
    EnvPoolConfigError,
    check_envpool,
    envpool_installed,
)
from jaxflow.envs.envpool_vector import EnvPoolVectorEnv
from jaxflow.envs.flatten import FlatObservation, flat_space, flatten_observations, is_flattenable
from jaxflow.envs.integer_actions import IntegerChoiceActions, discrete_actions, is_integer_choice
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
    BRAX_PREFIX,
    GYMNAX_PREFIX,
    JAX_KINDS,
    EnvKindError,
    UnknownEnvError,
    entry,
    list_envs,
    make,
    make_cpu,
    make_multiagent,
)
from jaxflow.envs.user_envs import (
    EnvContext,
    adopt,
    custom_entry,
    register,
    register_factory,
    register_jax,
    register_multiagent,
)
from jaxflow.envs.vector import EnvSpaceError, VectorEnv, VectorStep

_GYMNAX_NAMES = {
    "jaxflow.envs.brax_envs": "BraxConfigError BraxEnv",
    "jaxflow.envs.jax_libraries": "JaxLibraryConfigError LibraryEnv",
    "jaxflow.envs.stateless": "StatelessCartPole",
    "jaxflow.envs.tasks": "TaskDistribution list_task_distributions make_task_distribution",
}
_MODULE_OF = {name: module for module, names in _GYMNAX_NAMES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    """A name of ``_GYMNAX_NAMES``, imported on first use (then found in the module's globals)."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from jaxflow.envs.brax_envs import BraxConfigError, BraxEnv
    from jaxflow.envs.jax_libraries import JaxLibraryConfigError, LibraryEnv
    from jaxflow.envs.stateless import StatelessCartPole
    from jaxflow.envs.tasks import TaskDistribution, list_task_distributions, make_task_distribution

STATELESS_CARTPOLE = "jaxflow/StatelessCartPole-v1"
"""gymnax's CartPole with its velocities hidden (:mod:`jaxflow.envs.stateless`)."""


def _make_stateless_cartpole(**env_params: Any) -> tuple[Any, Any]:
    from jaxflow.envs.stateless import make_stateless_cartpole  # with gymnax, when the env is made

    return make_stateless_cartpole(**env_params)


register_jax(STATELESS_CARTPOLE, _make_stateless_cartpole, "CartPole-v1 with its velocities hidden (needs memory)")

__all__ = [
    "BRAX_PREFIX",
    "ENVPOOL_IDS",
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
    "EnvPoolConfigError",
    "EnvPoolVectorEnv",
    "EnvSpaceError",
    "FlatMaskedObservation",
    "FlatObservation",
    "IntegerChoiceActions",
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
    "check_envpool",
    "check_file_env_config",
    "custom_entry",
    "discrete_actions",
    "entry",
    "env_options",
    "envpool_installed",
    "flat_space",
    "flatten_observations",
    "is_flattenable",
    "is_integer_choice",
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
