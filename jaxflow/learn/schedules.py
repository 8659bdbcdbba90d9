"""A config's ``schedules`` at work: the optimizer's learning rate and clipping as optax
schedules of its update count, the loss's fields at the train state's step.

Both count optimizer steps, so at step ``k`` every scheduled value is its schedule's value
at ``k`` (see :mod:`jaxflow.config.schedules` for the format and its checks).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxflow.config.names import with_values
from jaxflow.config.schedules import OPTIMIZER_FIELDS
from jaxflow.learn.sgd import AnyLoss

Array = jax.Array


def piecewise_linear(points: Sequence[Sequence[float]]) -> Callable[[Array], Array]:
    """The curve through ``[step, value]`` points, flat before the first and after the last.

    Example:
        >>> f = piecewise_linear([[0, 1.0], [10, 0.0], [20, 0.5]])
        >>> [round(float(f(jnp.int32(s))), 3) for s in (0, 5, 10, 15, 30)]
        [1.0, 0.5, 0.0, 0.25, 0.5]
    """
    steps = jnp.asarray([p[0] for p in points], jnp.float32)
    values = jnp.asarray([p[1] for p in points], jnp.float32)
    return lambda step: jnp.interp(jnp.asarray(step, jnp.float32), steps, values)


def scheduled_optimizer(
    factory: Callable[..., optax.GradientTransformation], config: Any
) -> optax.GradientTransformation:
    """``factory(lr, max_grad_norm)`` with both in its state (:func:`optax.inject_hyperparams`):
    each a schedule where ``config.schedules`` names it, else the config's value (which a
    device-mode sweep sets per member)."""
    hyper: dict[str, Any] = {f: getattr(config.optimizer, f) for f in OPTIMIZER_FIELDS}
    for field, points in _named(config, OPTIMIZER_FIELDS).items():
        hyper[field] = piecewise_linear(points)
    return optax.inject_hyperparams(factory)(**hyper)


def learner_optimizer(
    factory: Callable[..., optax.GradientTransformation], config: Any
) -> optax.GradientTransformation:
    """The Ray-mode learner's optimizer: :func:`scheduled_optimizer` where the config schedules
    ``lr`` or ``max_grad_norm``, else ``factory(lr, max_grad_norm)`` (whose state checkpoints
    of unscheduled runs hold)."""
    if _named(config, OPTIMIZER_FIELDS):
        return scheduled_optimizer(factory, config)
    return factory(config.optimizer.lr, config.optimizer.max_grad_norm)


@dataclasses.dataclass(frozen=True, eq=False)  # configs hold dicts: hashed by identity
class ScheduledLoss:
    """``loss(params, batch, rng[, target], policy=, config=[, step=])`` whose config holds
    each scheduled loss field's value at the optimizer step (:func:`~jaxflow.learn.sgd.sgd_step`
    calls :meth:`at` with the train state's step), and which gets that step itself where it
    takes a ``step`` keyword (TD3's loss, skipping the actor's gradient between its steps).
    Its metrics gain the scheduled values used."""

    loss: Callable[..., Any]
    policy: Any
    config: Any

    def at(self, step: Array) -> Callable[..., Any]:
        values = {f: piecewise_linear(p)(step) for f, p in self.config.schedules.items()}
        config = with_values(self.config, {f: v for f, v in values.items() if _leaf(f) not in OPTIMIZER_FIELDS})
        extra = {"step": step} if takes_step(self.loss) else {}

        def loss_fn(*args: Any) -> tuple[Array, Mapping[str, Array]]:
            loss, metrics = self.loss(*args, policy=self.policy, config=config, **extra)
            return loss, dict(metrics, **{_leaf(f): v for f, v in values.items()})

        return loss_fn


def takes_step(loss: Callable[..., Any]) -> bool:
    """Whether ``loss`` has a ``step`` parameter (the SGD step it is evaluated at)."""
    return "step" in inspect.signature(loss).parameters


def bind_loss(loss: Callable[..., Any], policy: Any, config: Any) -> AnyLoss:
    """The learner's ``loss_fn(params, batch, rng[, target])``: ``loss`` with its policy and
    config, a :class:`ScheduledLoss` when the config has schedules or the loss takes the step."""
    if config.schedules or takes_step(loss):
        return ScheduledLoss(loss, policy, config)
    return functools.partial(loss, policy=policy, config=config)


def _leaf(field: str) -> str:
    """A field's own name, however the schedule names it (``optimizer.lr`` or ``lr``)."""
    return field.rsplit(".", 1)[-1]


def _named(config: Any, fields: Sequence[str]) -> dict[str, Any]:
    """The schedules of ``fields`` in ``config.schedules``, keyed by the fields' own names."""
    return {_leaf(f): p for f, p in config.schedules.items() if _leaf(f) in fields}
