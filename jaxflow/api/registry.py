"""The registry of algorithms: by name, by config class, and through package entry points.

An algorithm page registers its :class:`~jaxflow.api.spec.AlgorithmSpec` when it is
imported. The engine never imports ``jaxflow.algorithms``: it finds an algorithm it has not
seen yet through the ``jaxflow.algorithms`` entry-point group, which the package declares in
its metadata (``pyproject.toml``) and which any other installed distribution can add to.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import TYPE_CHECKING

from jaxflow.config.common import CommonConfig
from jaxflow.config.fields import ConfigError, did_you_mean

if TYPE_CHECKING:  # the spec module imports JAX; `jaxflow list` names algorithms from its cache without it
    from jaxflow.api.spec import AlgorithmSpec

ENTRY_POINT_GROUP = "jaxflow.algorithms"
"""Entry points ``NAME = "module:SPEC"`` of every installed algorithm."""

UNKNOWN_ALGORITHM_CUTOFF = 0.4
"""How alike an algorithm's name must be to be offered for an unknown one: lower than for a
field, since the names are short (one letter off in ``PPO`` leaves difflib's ratio at 0.67)."""

_ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Adds ``spec`` under its (case-insensitive) name; returns it, for ``NAME = register_algorithm(...)``."""
    _ALGORITHMS[spec.name.upper()] = spec
    return spec


@functools.cache
def _entry_points() -> dict[str, metadata.EntryPoint]:
    """Read once per process: scanning every installed distribution's metadata takes about
    12 ms, and listing the envs asks for the algorithms some 700 times (a package installed
    while the process runs is seen by the next one)."""
    return {ep.name.upper(): ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load(name: str) -> AlgorithmSpec | None:
    if name not in _ALGORITHMS:
        ep = _entry_points().get(name)
        if ep is None:
            return None
        register_algorithm(ep.load())
    return _ALGORITHMS.get(name)


def _load_all() -> dict[str, AlgorithmSpec]:
    for name in _entry_points():
        _load(name)
    return _ALGORITHMS


def list_algorithms() -> list[str]:
    """Names for ``--algo`` (a multi-agent run names its policies' algorithms in its config)."""
    return sorted(spec.name for spec in _load_all().values() if issubclass(spec.config_cls, CommonConfig))


def get_algorithm(name: str) -> AlgorithmSpec:
    """The registered algorithm called ``name`` (case-insensitive)."""
    spec = _load(name.upper())
    if spec is None:
        raise unknown_algorithm(name, list(_load_all()), list_algorithms())
    return spec


def unknown_algorithm(name: str, known: list[str], available: list[str]) -> ConfigError:
    """The error for ``name``, no algorithm: the closest of ``known`` (upper-case names) and every
    one of ``available`` (those ``--algo`` takes)."""
    hint = did_you_mean(name.upper(), known, cutoff=UNKNOWN_ALGORITHM_CUTOFF)
    return ConfigError(f"Unknown algorithm {name!r}.{hint} Available: {', '.join(available)}.")


def spec_of(config: object) -> AlgorithmSpec:
    """The registered algorithm whose config class is ``type(config)``."""
    if isinstance(config, type):
        raise ConfigError(f"A config object is needed, got the class {config.__name__}; pass {config.__name__}().")
    for registry in (_ALGORITHMS, _load_all()):
        for spec in registry.values():
            if type(config) is spec.config_cls:
                return spec
    raise ConfigError(f"No registered algorithm uses {type(config).__name__}.")


def device_algorithms() -> list[str]:
    """Names of the algorithms that can train on the device."""
    return sorted(spec.name for spec in _load_all().values() if spec.run.device is not None)


def multiagent_algorithms() -> list[str]:
    """Names of the algorithms that can train a policy of a multi-agent run."""
    return sorted(spec.name for spec in _load_all().values() if spec.run.flow is not None)


def algorithms_for_space(kind: str) -> list[str]:
    """Names of the algorithms that act in action spaces of class ``kind`` (e.g. ``"Box"``)."""
    return [name for name in list_algorithms() if kind in _ALGORITHMS[name.upper()].action_spaces]
