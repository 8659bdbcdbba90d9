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

A recurrent model (``model`` plus ``use_lstm=True``, for PPO, A2C, IMPALA and APPO: the flag
says the model carries a state, jaxflow's LSTM is then not built, and ``lstm_size`` is refused)
is one time step, as :class:`~jaxflow.networks.recurrent.LSTMActorCritic` is: it has
``initial_carry(batch_size)``, the state of new episodes, any pytree of ``[B, ...]`` arrays (a
GRU's one array, an LSTM's pair), and ``__call__(carry, obs)`` returns ``(carry, (distribution
inputs [B, D], value [B]))`` with the carry of the same structure, shapes and dtypes. The
policy resets a row to ``initial_carry`` where an episode starts, and stores, unrolls and
restores the carry as it does the LSTM's; :func:`check_outputs` refuses a model whose carry
changes. R2D2's recurrent Q-network takes no custom model yet.

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


class UnknownModelError(ConfigError):
    """A model name that nothing registered, or a ``module:Attr`` that cannot be imported."""


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
        raise UnknownModelError(
            f"Unknown model {name!r}: register it with jaxflow.register_model, or name it as "
            f"'package.module:Class'. Registered: {', '.join(known) or 'none'}."
        )
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        where = " (a class defined in a script or notebook is only known to the process that defined it)"
        raise UnknownModelError(
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


CHECK_BATCH = 2
"""The batch :func:`check_outputs` traces a model with (abstractly: nothing is computed)."""


def _shapes(tree: Any) -> Any:
    return jax.tree.map(lambda s: tuple(s.shape), tree)


def _described(tree: Any) -> Any:
    return jax.tree.map(lambda s: f"{s.dtype}{list(s.shape)}", tree)


def check_outputs(
    name: str, module: nn.Module, obs_shape: tuple[int, ...], expected: Any, what: str, recurrent: bool = False
) -> None:
    """Raises a one-line :class:`ConfigError` unless ``module`` maps observations ``[2, *obs_shape]``
    to outputs of ``expected`` shapes (a shape tuple or a tuple of them), described as ``what``;
    a ``recurrent`` one (see the module docstring) from its ``initial_carry(2)`` to that carry's
    structure, shapes and dtypes and those outputs."""
    if recurrent:
        got = _recurrent_outputs(name, module, obs_shape, what, expected)
    else:
        obs = jnp.zeros((CHECK_BATCH, *obs_shape), jnp.float32)

        def outputs() -> Any:
            return module.apply(module.init(jax.random.PRNGKey(0), obs), obs)

        recurrent_hint = " (it has initial_carry: a recurrent model trains with use_lstm=True)"
        hint = recurrent_hint if hasattr(module, "initial_carry") else ""
        got = _shapes(_traced(name, outputs, f"observations of shape [B, {obs_shape}]{hint}"))
    if got != expected:
        raise ConfigError(f"Model {name!r} returns shapes {got} for a batch of 2; expected {what}: {expected}.")


def _traced(name: str, fn: Callable[[], Any], inputs: str) -> Any:
    """``fn``'s output shapes, or a :class:`ConfigError` naming the model and the ``inputs`` it failed on."""
    try:
        return jax.eval_shape(fn)
    except Exception as e:  # the user's module failed to trace: say which one, with its own words
        raise ConfigError(f"Model {name!r} fails on {inputs}: {e}") from None


def _recurrent_outputs(name: str, module: nn.Module, obs_shape: tuple[int, ...], what: str, expected: Any) -> Any:
    """The shapes of a recurrent model's outputs, once its carry is checked to come back unchanged."""
    if not callable(getattr(module, "initial_carry", None)):
        raise ConfigError(
            f"Model {name!r} has no initial_carry(batch_size): with use_lstm=True a model is recurrent, "
            f"(carry, obs) -> (carry, outputs), its outputs {what}: {expected}."
        )
    obs = jnp.zeros((CHECK_BATCH, *obs_shape), jnp.float32)

    def step() -> Any:
        carry = module.initial_carry(CHECK_BATCH)
        return carry, module.apply(module.init(jax.random.PRNGKey(0), carry, obs), carry, obs)

    carry, out = _traced(name, step, f"(initial_carry(2), observations of shape [B, {obs_shape}])")
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ConfigError(f"Model {name!r} returns {_described(out)}; a recurrent model returns (carry, outputs).")
    after, outputs = out
    same = str(jax.tree.structure(after)) == str(jax.tree.structure(carry)) and _described(after) == _described(carry)
    if not same or any(s.shape[:1] != (CHECK_BATCH,) for s in jax.tree.leaves(carry)):
        raise ConfigError(
            f"Model {name!r} takes the carry {_described(carry)} (initial_carry(2)) and returns {_described(after)}; "
            "expected the same structure, shapes and dtypes, each array [B, ...]."
        )
    return _shapes(outputs)
