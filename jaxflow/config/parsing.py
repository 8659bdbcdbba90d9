"""Configs from text: ``--set FIELD=VALUE`` strings, saved JSON and config files.

Every name may be flat (``num_workers``) or dotted (``rollout.num_workers``); see
:mod:`jaxflow.config.names`. JSON keeps a config's groups as nested objects, and a group's
fields may also be given flat (configs saved before the groups existed still load).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from jaxflow.config.fields import ConfigError, _type_name, require
from jaxflow.config.names import field_type, flat_names, groups, is_field, make_config, replace_config, resolve

C = TypeVar("C")

UNSET_BEFORE = {"lstm_size": 64}
"""Fields a config written by an older jaxflow holds at their old default, unused beside a
``model``, that are now left unset (None) there, where they are refused."""


def parse_value(cls: type, field: str, text: str) -> Any:
    """Parses the string ``text`` as a value of the setting ``field`` (flat or dotted) of ``cls``."""
    tp = field_type(cls, resolve(cls, field))
    try:
        return _parse(text, tp)
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{cls.__name__}.{field} must be {_type_name(tp)}, got {text!r}.") from e


def _parse(text: str, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.lower() in ("none", "null"):
            return None
        for t in args:
            if t is type(None):
                continue
            try:
                return _parse(text, t)
            except (ValueError, TypeError, json.JSONDecodeError):
                continue
        raise ValueError(text)
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp is str or origin is Literal:
        return text
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_parse(t.strip(), item) for t in text.strip("()[] ").split(",") if t.strip())
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(text)
        return value
    raise TypeError(f"cannot parse {tp}")


def with_overrides(config: C, overrides: Mapping[str, str]) -> C:
    """A new config with string overrides (from ``--set``, flat or dotted names) parsed and validated."""
    return replace_config(config, **{k: parse_value(type(config), k, v) for k, v in overrides.items()})


def to_json_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON values: groups as nested objects, tuples as lists."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def _flatten(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object of ``cls``'s fields by flat or dotted name: each group's object becomes its dotted fields."""
    held = groups(cls)
    out: dict[str, Any] = {}
    for k, v in data.items():
        if k in held and isinstance(v, Mapping):
            out.update({f"{k}.{name}": x for name, x in v.items()})
        else:
            out[k] = v
    return out


def json_values(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object of ``cls``'s fields (flat or dotted names, or groups as nested objects) as
    :func:`make_config`'s keyword arguments: JSON lists of tuple fields become tuples again."""
    values = {}
    for k, v in _flatten(cls, data).items():
        tp = field_type(cls, resolve(cls, k))
        values[k] = tuple(v) if typing.get_origin(tp) is tuple and isinstance(v, list) else v
    return values


def from_json_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """Rebuilds a config written by :func:`to_json_dict` (or one with flat names), restoring tuples;
    in one written with a ``model`` by an older jaxflow, the unused defaults of :data:`UNSET_BEFORE` are unset."""
    values = json_values(cls, data)
    if values.get("model") is not None:
        values.update({k: None for k, old in UNSET_BEFORE.items() if values.get(k) == old})
    return make_config(cls, **values)


def load_config_file(cls: type, path: str) -> Any:
    """A config of class ``cls`` from a JSON file of its fields, flat, dotted or nested (e.g. ``--multiagent FILE``)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e}).") from e
    except (OSError, UnicodeDecodeError) as e:  # missing, a directory, unreadable, not text
        raise ConfigError(f"{path}: cannot be read as a JSON file ({getattr(e, 'strerror', None) or e}).") from e
    fields = sorted(flat_names(cls))
    values = _flatten(cls, data) if isinstance(data, dict) else None
    bad = sorted(k for k in values if not is_field(cls, k)) if values is not None else None
    require(
        bad == [],
        f"{path}: unknown keys {bad}; a {cls.__name__} has {fields}."
        if bad
        else f"{path}: a {cls.__name__} is a JSON object of its fields {fields}.",
    )
    return make_config(cls, **(values or {}))
