"""Config machinery: frozen, validated dataclasses and their parsing from ``--set FIELD=VALUE``."""

from jaxflow.config.common import CommonConfig
from jaxflow.config.fields import (
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    Check,
    ConfigError,
    field_names,
    from_json_dict,
    load_config_file,
    param,
    parse_value,
    require,
    to_json_dict,
    validate,
    with_overrides,
)

__all__ = [
    "NON_NEGATIVE",
    "POSITIVE",
    "UNIT",
    "Check",
    "CommonConfig",
    "ConfigError",
    "field_names",
    "from_json_dict",
    "load_config_file",
    "param",
    "parse_value",
    "require",
    "to_json_dict",
    "validate",
    "with_overrides",
]
