"""Config machinery: frozen, validated dataclasses, their groups of settings, and their
parsing from ``--set FIELD=VALUE`` (flat or dotted names)."""

from jaxflow.config.common import CommonConfig
from jaxflow.config.constants import (
    ACTOR_STOP_TIMEOUT_S,
    EVALUATION_SEED_OFFSET,
    FREE_CPU_PATIENCE_S,
    INCARNATION_SEED_STRIDE,
    POLL_S,
    STARTUP_TIMEOUT_S,
    THREAD_JOIN_TIMEOUT_S,
    WORKER_SEED_STRIDE,
    worker_seed,
)
from jaxflow.config.fields import (
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    Check,
    ConfigError,
    field_names,
    param,
    require,
    validate,
)
from jaxflow.config.groups import NO_CLIPPING, DeviceConfig, DistributedReplayConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.names import StrictKeywords, flat_names, make_config, replace_config, resolve
from jaxflow.config.off_policy import OffPolicyConfig
from jaxflow.config.parsing import (
    from_json_dict,
    json_values,
    load_config_file,
    parse_value,
    to_json_dict,
    with_overrides,
)

__all__ = [
    "ACTOR_STOP_TIMEOUT_S",
    "EVALUATION_SEED_OFFSET",
    "FREE_CPU_PATIENCE_S",
    "INCARNATION_SEED_STRIDE",
    "NON_NEGATIVE",
    "NO_CLIPPING",
    "POLL_S",
    "POSITIVE",
    "STARTUP_TIMEOUT_S",
    "THREAD_JOIN_TIMEOUT_S",
    "UNIT",
    "WORKER_SEED_STRIDE",
    "Check",
    "CommonConfig",
    "ConfigError",
    "DeviceConfig",
    "DistributedReplayConfig",
    "OffPolicyConfig",
    "OptimizerConfig",
    "RolloutConfig",
    "StrictKeywords",
    "field_names",
    "flat_names",
    "from_json_dict",
    "json_values",
    "load_config_file",
    "make_config",
    "param",
    "parse_value",
    "replace_config",
    "require",
    "resolve",
    "to_json_dict",
    "validate",
    "with_overrides",
    "worker_seed",
]
