"""Callbacks: your hooks into a run, as RLlib's callbacks and SB3's ``BaseCallback`` are.

A callback is any object with any of the three methods of :class:`Callbacks`; a run takes
one, a class (made with no arguments) or a list of them, called in order. A config keeps
their ``"module:Attr"`` names (its ``callbacks`` field), so that a checkpoint remembers them
and :meth:`~jaxflow.api.algorithm.Algorithm.restore` and ``--resume`` make them again;
``Algorithm.build(callbacks=...)`` takes the objects themselves and stores their names.

- ``on_train_result(algo, result)``: in the driver after every training iteration, inside
  ``Algorithm.train()``, before the result is logged. It may add metrics to
  ``result["custom_metrics"]`` (every writer logs them) and returns True to stop the run
  (:func:`~jaxflow.api.loop.train` then ends it as if a stop condition held, the result's
  ``stopped_by`` naming the callback).
- ``on_checkpoint(algo, path)``: after every checkpoint ``Algorithm.save`` writes.
- ``on_episode_end(episode)``: where each episode ends (:mod:`jaxflow.rollout.episode_hooks`):
  on the rollout workers, which get the objects with their ``WorkerSpec``, or in the driver
  (``num_workers=0``, device mode); what it returns is summarized per iteration under
  ``custom_metrics`` as ``<name>_mean``, ``_min`` and ``_max``.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from jaxflow.api.spec import AlgorithmSpec
from jaxflow.api.stops import STOPPED_BY
from jaxflow.config.fields import ConfigError
from jaxflow.rollout.episode_hooks import CUSTOM_METRICS, EPISODE_HOOK, EpisodeEnd, episode_hooks

if TYPE_CHECKING:
    from jaxflow.api.algorithm import Algorithm

TRAIN_HOOK = "on_train_result"
CHECKPOINT_HOOK = "on_checkpoint"
HOOKS = (TRAIN_HOOK, CHECKPOINT_HOOK, EPISODE_HOOK)
"""The methods a callback object may have; it needs at least one."""

FIELD = "callbacks"
"""The config field that keeps the callbacks' names."""


class Callbacks(Protocol):
    """What a callback object may have: any of these methods (duck-typed; no base class).

    Example:
        >>> class Metrics:
        ...     def on_episode_end(self, episode):
        ...         return {"len_sq": episode.length**2}  # as custom_metrics len_sq_mean, _min, _max
        ...
        ...     def on_train_result(self, algo, result):
        ...         result["custom_metrics"]["iteration_sq"] = result["training_iteration"] ** 2
        ...         return result["training_iteration"] >= 20  # True: the run stops here
        >>> names, objects = callback_objects([Metrics, Metrics()])
        >>> names, [type(o).__name__ for o in objects]
        (('jaxflow.api.callbacks:Metrics', 'jaxflow.api.callbacks:Metrics'), ['Metrics', 'Metrics'])
        >>> algo = Algorithm.build("PPO", env="CartPole-v1", callbacks=Metrics)  # doctest: +SKIP
        >>> algo.train()["custom_metrics"]["len_sq_mean"]                          # doctest: +SKIP
    """

    def on_train_result(self, algo: Algorithm, result: dict[str, Any]) -> bool | None:
        """After each training iteration: may add to ``result["custom_metrics"]``; True stops the run."""

    def on_checkpoint(self, algo: Algorithm, path: str) -> None:
        """After each checkpoint the run writes, at ``path``."""

    def on_episode_end(self, episode: EpisodeEnd) -> Mapping[str, float] | None:
        """Where an episode ends: metrics of it (numbers by name), or None."""


class CallbackError(ConfigError):
    """A callback that cannot be named, made or used, or that answered out of its contract: one line."""


def name_of(callback: Any) -> str:
    """``"module:QualName"`` of a callback's class (of ``callback`` itself, where it is a class)."""
    cls = callback if isinstance(callback, type) else type(callback)
    return f"{cls.__module__}:{cls.__qualname__}"


def callback_objects(given: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """``(names, objects)`` of what a user passes as ``callbacks=``: an object, a class (made
    with no arguments), a ``"module:Attr"`` name, or a list or tuple of them (None: none)."""
    items = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
    names, objects = [], []
    for item in items:
        if isinstance(item, str):
            names.append(item)
            objects.append(resolve_callbacks([item])[0])
        elif isinstance(item, types.ModuleType):
            raise CallbackError(f"callbacks: got the module {item.__name__!r}; give a class or an object of it.")
        else:
            names.append(name_of(item))
            objects.append(_made(item, names[-1]))
    return tuple(names), tuple(objects)


def resolve_callbacks(names: Sequence[str], restoring: bool = False) -> tuple[Any, ...]:
    """The objects ``names`` (``"module:Attr"``) stand for, a class made with no arguments.
    One that cannot be imported here raises a one-line :class:`CallbackError`; ``restoring``:
    it says how to give the callbacks to a restored run instead."""
    objects = []
    for name in names:
        module_name, _, path = name.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
            for part in path.split("."):
                found = getattr(found, part)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name == e.name or module_name.startswith(f"{e.name}.")):
                raise  # the user's module imports something missing: its own error
            raise CallbackError(_unresolved(name, f"no module named {e.name!r}", restoring)) from None
        except AttributeError as e:
            raise CallbackError(_unresolved(name, str(e), restoring)) from None
        objects.append(_made(found, name))
    return tuple(objects)


def _unresolved(name: str, why: str, restoring: bool) -> str:
    local = name.startswith("__main__:") or "<locals>" in name
    where = " (a class defined in a script, a notebook or a function is known only to the process that made it)"
    text = f"callbacks {name!r} cannot be made here: {why}{where if local else ''}; "
    if restoring:
        return text + "pass callbacks= to Algorithm.restore (or --set callbacks=MODULE:ATTR with --resume)."
    return text + "--import the module that defines it, or name it as MODULE:ATTR importable here."


def _made(found: Any, name: str) -> Any:
    """``found`` as a callback object: a class made with no arguments; refused without any of :data:`HOOKS`."""
    if isinstance(found, type):
        try:
            inspect.signature(found).bind()
        except TypeError as e:
            raise CallbackError(
                f"callbacks {name!r}: a class is made with no arguments ({e}); pass an object of it."
            ) from None
        except ValueError:  # no signature to read (a builtin): made as it is
            pass
        found = found()
    if not any(callable(getattr(found, hook, None)) for hook in HOOKS):
        raise CallbackError(
            f"callbacks {name!r}: {type(found).__qualname__} has none of the methods {', '.join(HOOKS)}."
        )
    return found


def run_callbacks(
    config: Any, spec: AlgorithmSpec, given: Sequence[Any] | None = None, restoring: bool = False
) -> tuple[Any, ...]:
    """The callback objects of a run of ``config``: ``given`` (already made), else those its
    ``callbacks`` names; refused where the run's program would not call an ``on_episode_end``."""
    objects = tuple(given) if given is not None else resolve_callbacks(getattr(config, FIELD, ()), restoring)
    if spec.run.program is not None:
        episodic = [name_of(c) for c in objects if episode_hooks([c])]
        if episodic:
            raise CallbackError(
                f"callbacks {episodic[0]!r}: {spec.name} runs a program of its own, which calls no {EPISODE_HOOK} "
                f"(the Ray-mode and device-mode programs of the other algorithms do); {TRAIN_HOOK} and "
                f"{CHECKPOINT_HOOK} work with it."
            )
    return objects


class RunCallbacks:
    """A run's callbacks, as :class:`~jaxflow.api.algorithm.Algorithm` calls them in the driver."""

    def __init__(self, objects: Sequence[Any]):
        self.objects = tuple(objects)
        self._train = [
            (name_of(c), getattr(c, TRAIN_HOOK)) for c in self.objects if callable(getattr(c, TRAIN_HOOK, None))
        ]
        self._checkpoint = [
            getattr(c, CHECKPOINT_HOOK) for c in self.objects if callable(getattr(c, CHECKPOINT_HOOK, None))
        ]

    def train_result(self, algo: Algorithm, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` after every ``on_train_result`` (in order); where one returned True, its
        ``stopped_by`` names the first that did."""
        if not self._train:
            return result
        result.setdefault(CUSTOM_METRICS, {})
        for name, hook in self._train:
            answer = hook(algo, result)
            if answer is None or (isinstance(answer, (bool, np.bool_)) and not answer):
                continue
            if not isinstance(answer, (bool, np.bool_)):
                raise CallbackError(
                    f"{name}.{TRAIN_HOOK} returned {answer!r:.200}; it returns True to stop the run, else None or False."
                )
            result.setdefault(STOPPED_BY, f"callback {name}")
        return result

    def checkpoint(self, algo: Algorithm, path: str) -> None:
        """Every ``on_checkpoint``, in order, with the checkpoint written at ``path``."""
        for hook in self._checkpoint:
            hook(algo, path)
