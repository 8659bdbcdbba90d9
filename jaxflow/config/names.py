"""The names a user types for a config's fields: flat (``num_workers``) or dotted (``rollout.num_workers``).

A config holds some of its settings in groups (a field whose type is a frozen dataclass,
e.g. ``rollout: RolloutConfig``). Users keep typing one flat name per setting; these
functions route each name to the group that holds it, so ``make_config(PPOConfig, lr=1e-3)``
and ``replace_config(config, num_workers=0)`` need no knowledge of the grouping.

>>> from jaxflow.config import CommonConfig
>>> config = make_config(CommonConfig, num_workers=0, lr=1e-3, gamma=0.9)
>>> config.rollout.num_workers, config.optimizer.lr, config.gamma
(0, 0.001, 0.9)
>>> replace_config(config, **{"rollout.num_workers": 4}).rollout.num_workers
4
>>> resolve(CommonConfig, "lr")
('optimizer', 'lr')
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any, TypeVar

from jaxflow.config.fields import Check, ConfigError, _hints, did_you_mean, field_names, require

C = TypeVar("C")

Path = tuple[str, ...]
"""Where a field lives: ``("gamma",)`` in the config itself, ``("rollout", "num_workers")`` in a group."""


def groups(cls: type) -> dict[str, type]:
    """The fields of config class ``cls`` that hold a group of settings, and the groups' classes."""
    hints = _hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


def flat_names(cls: type) -> list[str]:
    """Every setting of ``cls`` by its flat name: its own fields, with each group replaced by the group's fields."""
    held = groups(cls)
    return [name for f in field_names(cls) for name in (field_names(held[f]) if f in held else [f])]


def dotted_names(cls: type) -> list[str]:
    """The settings that live in groups by their dotted names, e.g. ``rollout.num_workers``."""
    return [f"{g}.{name}" for g, sub in groups(cls).items() for name in field_names(sub)]


def resolve(cls: type, name: str) -> Path:
    """Where the setting ``name`` (flat or dotted) of config class ``cls`` lives.

    A group's own name (``rollout``) resolves to the whole group. An unknown name raises
    :class:`ConfigError` with the closest names and every allowed one.
    """
    return _resolve(cls, name)


@functools.cache  # a class's fields never change; PBT and schedules resolve names at every step
def _resolve(cls: Any, name: str) -> Path:
    held = groups(cls)
    head, dot, leaf = name.partition(".")
    if dot:
        if head in held and leaf in field_names(held[head]):
            return (head, leaf)
        raise unknown_field(cls, name, dotted_names(cls))
    found: list[Path] = [(name,)] if name in field_names(cls) else []
    found += [(g, name) for g, sub in held.items() if name in field_names(sub)]
    require(
        len(found) <= 1,
        f"{cls.__name__}: {name!r} names {['.'.join(p) for p in found]}; use the dotted name of the one you mean.",
    )
    if not found:
        raise unknown_field(cls, name, flat_names(cls))
    return found[0]


def unknown_field(cls: type, name: str, candidates: list[str]) -> ConfigError:
    """The error for a name that is no field of ``cls``: the closest ``candidates`` and every flat name."""
    hint = did_you_mean(name, candidates)
    return ConfigError(f"{cls.__name__} has no field {name!r}.{hint} Fields: {', '.join(flat_names(cls))}.")


class StrictKeywords:
    """Base of config classes: their constructor refuses a keyword that is no field of theirs
    with the :class:`ConfigError` that ``make_config`` and ``--set`` give (the closest names),
    not the dataclass ``__init__``'s bare ``TypeError``.

    >>> from jaxflow.config import OptimizerConfig
    >>> OptimizerConfig(lrr=0.1)
    Traceback (most recent call last):
    ...
    jaxflow.config.fields.ConfigError: OptimizerConfig has no field 'lrr'. Did you mean 'lr'? Fields: lr, max_grad_norm, on_nonfinite.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        own = field_names(cls)
        for name in kwargs:
            if name in own:
                continue
            if is_field(cls, name):  # a group's setting: the constructor takes the group itself
                raise ConfigError(
                    f"{cls.__name__}({name}=...): {name!r} lives in the group {resolve(cls, name)[0]!r}; "
                    f"make_config({cls.__name__}, {name}=...) takes flat and dotted names."
                )
            raise unknown_field(cls, name, flat_names(cls))
        return super().__new__(cls)


def is_field(cls: type, name: str) -> bool:
    """Whether ``name`` (flat or dotted) is a setting of ``cls``."""
    try:
        resolve(cls, name)
    except ConfigError:
        return False
    return True


def field_check(cls: type, name: str) -> Check | None:
    """The numeric constraint (:class:`~jaxflow.config.fields.Check`) declared on the setting
    ``name`` (flat or dotted) of config class ``cls``, or None where it has none."""
    *group, leaf = resolve(cls, name)
    owner = groups(cls)[group[0]] if group else cls
    return {f.name: f for f in dataclasses.fields(owner)}[leaf].metadata.get("check")


def field_type(cls: type, path: Path) -> Any:
    """The declared type of the setting at ``path`` of config class ``cls``."""
    owner = groups(cls)[path[0]] if len(path) == 2 else cls
    return _hints(owner)[path[-1]]


def _split(cls: type, changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``changes`` by flat or dotted name, as the config's own fields and each group's fields."""
    own: dict[str, Any] = {}
    held: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        path = resolve(cls, name)
        if len(path) == 1:
            own[path[0]] = value
        else:
            held.setdefault(path[0], {})[path[1]] = value
    return own, held


def _default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _with(cls: type, name: str, group: Any, values: dict[str, Any]) -> Any:
    """The group ``name`` of ``cls`` as ``group`` with ``values``, validated; its errors name
    ``cls`` (``PPOConfig.lr``), the config a user typing flat names knows, not the group's
    class (``OptimizerConfig.lr``)."""
    held = groups(cls)[name]
    require(isinstance(group, held), f"{cls.__name__}.{name} must be {held.__name__}, got {group!r}.")
    try:
        return dataclasses.replace(group, **values)
    except ConfigError as e:
        raise ConfigError(str(e).replace(f"{type(group).__name__}.", f"{cls.__name__}.", 1)) from e


def make_config(cls: type[C], /, **changes: Any) -> C:
    """A ``cls`` config from its defaults and ``changes`` keyed by flat or dotted names.

    A group's fields start from ``cls``'s default group, so ``make_config(PPOConfig, lr=0.1)``
    keeps PPO's other optimizer defaults. Validated on construction, like ``cls(...)``.
    """
    own, held = _split(cls, changes)
    for g, values in held.items():
        own[g] = _with(cls, g, own.get(g, _default(cls, g)), values)
    return cls(**own)


def replace_config(config: C, /, **changes: Any) -> C:
    """A copy of ``config`` with ``changes`` keyed by flat or dotted names (``dataclasses.replace``
    that knows the groups); the copy is validated, ``config`` is untouched."""
    require(
        dataclasses.is_dataclass(config) and not isinstance(config, type),
        f"replace_config takes a config object such as PPOConfig(), got {config!r}.",
    )
    own, held = _split(type(config), changes)
    for g, values in held.items():
        own[g] = _with(type(config), g, own.get(g, getattr(config, g)), values)
    return dataclasses.replace(config, **own)  # type: ignore[type-var]  # C is a dataclass


def with_values(config: C, values: dict[str, Any]) -> C:
    """A copy of ``config`` whose fields (flat or dotted names) hold ``values`` as they are:
    inside a compiled function they are tracers (a device-mode member's swept value, a
    scheduled value at the current step).

    The copy skips validation on purpose: every value was validated as a number when the run
    was configured (the sweep's values, the schedule's points).
    """
    if not values:
        return config
    traced = copy.copy(config)
    for k, v in values.items():
        *group, leaf = resolve(type(config), k)
        owner: Any = traced
        if group:  # copy the group too: the config's own group is shared with the caller
            owner = copy.copy(getattr(traced, group[0]))
            object.__setattr__(traced, group[0], owner)
        object.__setattr__(owner, leaf, v)
    return traced
