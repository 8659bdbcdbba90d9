"""The user-facing API: Algorithm, the spec and registry, the training loop, checkpoints
and the command line.

Names load on first use (PEP 562), as in :mod:`jaxflow`: the command line imports only what
the command it runs needs, so ``jaxflow --help`` starts no JAX or Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxflow._lazy import lazy_exports

_NAMES_BY_MODULE: dict[str, str] = {
    "jaxflow.api.algorithm": "Algorithm find_checkpoint load_policy",
    "jaxflow.api.callbacks": "Callbacks",
    "jaxflow.api.checkpoint": "FORMAT_VERSION CheckpointError latest load_meta save verify",
    "jaxflow.api.checkpoint_state": "restore_state",
    "jaxflow.api.cli": "MODES main",
    "jaxflow.api.loop": "train",
    "jaxflow.api.program": "CheckpointFiles Program build_program resolve_mode standard_program",
    "jaxflow.api.ray_program": "RayProgram build_learner init_ray",
    "jaxflow.api.registry": "ENTRY_POINT_GROUP device_algorithms get_algorithm list_algorithms multiagent_algorithms register_algorithm spec_of",
    "jaxflow.api.restore": "plan_restore state_template",
    "jaxflow.api.spaces": "check_observation_space check_spaces env_spaces",
    "jaxflow.api.spec": "AlgorithmSpec LearnerHooks RunHooks WorkerHooks",
    "jaxflow.api.stops": "STOP_KEYS parse_stop should_stop",
    "jaxflow.api.user_modules": "MissingNameError import_modules imported_modules",
    "jaxflow.api.writers": "ConsoleProgress JsonLinesWriter TensorBoardWriter",
}

if TYPE_CHECKING:
    from jaxflow.api.algorithm import Algorithm, find_checkpoint, load_policy
    from jaxflow.api.callbacks import Callbacks
    from jaxflow.api.checkpoint import FORMAT_VERSION, CheckpointError, latest, load_meta, save, verify
    from jaxflow.api.checkpoint_state import restore_state
    from jaxflow.api.cli import MODES, main
    from jaxflow.api.loop import train
    from jaxflow.api.program import CheckpointFiles, Program, build_program, resolve_mode, standard_program
    from jaxflow.api.ray_program import RayProgram, build_learner, init_ray
    from jaxflow.api.registry import (
        ENTRY_POINT_GROUP,
        device_algorithms,
        get_algorithm,
        list_algorithms,
        multiagent_algorithms,
        register_algorithm,
        spec_of,
    )
    from jaxflow.api.restore import plan_restore, state_template
    from jaxflow.api.spaces import check_observation_space, check_spaces, env_spaces
    from jaxflow.api.spec import AlgorithmSpec, LearnerHooks, RunHooks, WorkerHooks
    from jaxflow.api.stops import STOP_KEYS, parse_stop, should_stop
    from jaxflow.api.user_modules import MissingNameError, import_modules, imported_modules
    from jaxflow.api.writers import ConsoleProgress, JsonLinesWriter, TensorBoardWriter


__all__ = [
    "ENTRY_POINT_GROUP",
    "FORMAT_VERSION",
    "MODES",
    "STOP_KEYS",
    "Algorithm",
    "AlgorithmSpec",
    "Callbacks",
    "CheckpointError",
    "CheckpointFiles",
    "ConsoleProgress",
    "JsonLinesWriter",
    "LearnerHooks",
    "MissingNameError",
    "Program",
    "RayProgram",
    "RunHooks",
    "TensorBoardWriter",
    "WorkerHooks",
    "build_learner",
    "build_program",
    "check_observation_space",
    "check_spaces",
    "device_algorithms",
    "env_spaces",
    "find_checkpoint",
    "get_algorithm",
    "import_modules",
    "imported_modules",
    "init_ray",
    "latest",
    "list_algorithms",
    "load_meta",
    "load_policy",
    "main",
    "multiagent_algorithms",
    "parse_stop",
    "plan_restore",
    "register_algorithm",
    "resolve_mode",
    "restore_state",
    "save",
    "should_stop",
    "spec_of",
    "standard_program",
    "state_template",
    "train",
    "verify",
]


__getattr__, __dir__ = lazy_exports(__name__, _NAMES_BY_MODULE, globals())
