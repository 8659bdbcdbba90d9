"""Your own model: a flax module used in place of an algorithm's default network.

A config names its model by a string, so that it travels to Ray workers, into checkpoints
and through the CLI and JSON files (``model`` plus ``model_config`` keyword arguments):

- a name registered with :func:`register_model` (in this process, or by an installed
  package's ``jaxflow.models`` entry point): ``factory(num_outputs=D, **model_config)``;
- ``"package.module:Attr"``: a flax module class built as ``Attr(**model_config)``, or a
  factory called as a registered one is. :func:`describe_module` turns a module *instance*
  (``Algorithm.build("PPO", model=MyNet(...))``) into this form, its dataclass fields as
  ``model_config``.

What the module returns is the algorithm's contract: ``(distribution inputs [B, D], value
[B])`` for an actor-critic (``D = ActionDistribution.num_inputs``), Q-values ``[B, A]`` for a
Q-network; :func:`check_outputs` refuses any other shape when the policy is built.

Example:
    >>> from jaxflow.networks import MLPActorCritic
    >>> register_model("tiny", lambda num_outputs, width=8: MLPActorCritic(num_outputs, (width,)))
    >>> build_model("tiny", {"width": 4}, num_outputs=2).hidden_sizes
    (4,)
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from importlib import metadata
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxflow.config.fields import ConfigError

ENTRY_POINT_GROUP = "jaxflow.models"
"""Entry points ``NAME = "module:factory"`` of models installed packages offer."""

_MODELS: dict[str, Callable[..., nn.Module]] = {}
_MODULE_FIELDS_SKIPPED = ("parent", "name")  # flax's own fields of every module


def register_model(name: str, factory: Callable[..., nn.Module]) -> None:
    """Makes ``model=name`` build ``factory(num_outputs=D, **model_config)``."""
    _MODELS[name] = factory


def describe_module(module: nn.Module) -> tuple[str, dict[str, Any]]:
    """``("module:Class", fields)`` of a flax module instance: what a config stores to
    rebuild it (on Ray workers, from a checkpoint)."""
    cls = type(module)
    fields = {
        f.name: getattr(module, f.name)
        for f in dataclasses.fields(module)
        if f.init and f.name not in _MODULE_FIELDS_SKIPPED
    }
    return f"{cls.__module__}:{cls.__qualname__}", fields


def _resolve(name: str) -> Any:
    if name in _MODELS:
        return _MODELS[name]
    eps = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name in eps:
        register_model(name, eps[name].load())
        return _MODELS[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        known = sorted(set(_MODELS) | set(eps))
        raise ConfigError(
            f"Unknown model {name!r}: register it with jaxflow.register_model, or name it as "
            f"'package.module:Class'. Registered: {', '.join(known) or 'none'}."
        )
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        where = " (a class defined in a script or notebook is only known to the process that defined it)"
        raise ConfigError(
            f"Model {name!r} cannot be imported: {e}{where if module_name == '__main__' else ''}."
        ) from None
    return found


def check_model(name: str) -> None:
    """Raises :class:`ConfigError` unless the model ``name`` is registered or importable: the
    command line checks it before anything starts (the policy is built later, in the run)."""
    _resolve(name)


def build_model(name: str, model_config: dict[str, Any], num_outputs: int) -> nn.Module:
    """The module ``name`` stands for (see the module docstring), with ``model_config``: a
    module class takes them as its fields, a factory also gets ``num_outputs``."""
    found = _resolve(name)
    if isinstance(found, type) and issubclass(found, nn.Module):
        return found(**model_config)
    return found(num_outputs=num_outputs, **model_config)


def check_outputs(name: str, module: nn.Module, obs_shape: tuple[int, ...], expected: Any, what: str) -> None:
    """Raises a one-line :class:`ConfigError` unless ``module`` maps observations ``[2, *obs_shape]``
    to outputs of ``expected`` shapes (a shape tuple or a tuple of them), described as ``what``."""

    def outputs() -> Any:
        params = module.init(jax.random.PRNGKey(0), jnp.zeros((2, *obs_shape), jnp.float32))
        return module.apply(params, jnp.zeros((2, *obs_shape), jnp.float32))

    try:
        got = jax.tree.map(lambda s: tuple(s.shape), jax.eval_shape(outputs))
    except Exception as e:  # the user's module failed to trace: say which one, with its own words
        raise ConfigError(f"Model {name!r} fails on observations of shape [B, {obs_shape}]: {e}") from None
    if got != expected:
        raise ConfigError(f"Model {name!r} returns shapes {got} for a batch of 2; expected {what}: {expected}.")
