"""Streams produced by Ray actors: :class:`ParallelIterator` (one stream per actor,
``par_for_each`` on the actor side, ``gather_sync``/``gather_async`` into the driver) over
an :class:`ActorSource` that says which actors serve and what a failure does.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from jaxflow.dataflow import xla_cache
from jaxflow.dataflow.context import FlowContext
from jaxflow.dataflow.errors import carrying, keep_remote_traceback, location, user_frame
from jaxflow.dataflow.iterators import LocalIterator, _name, _Shared

T = TypeVar("T")
U = TypeVar("U")


class Done:
    """A reply already in hand: what :meth:`ActorSource.submit` returns for an "actor" that
    runs in this process (a rollout worker with ``num_workers=0``), so that its result skips
    the object store's put and get."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class ActorSource(Protocol):
    """The actors behind a :class:`ParallelIterator` and what to do when one fails."""

    timeout_s: float

    def live(self) -> list[tuple[int, Any]]:
        """``(index, handle)`` of every actor currently in service."""

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef | Done:
        """Starts ``method`` on the actor, then ``fns`` on its result, actor side (or runs
        them here and returns :class:`Done`)."""

    def on_failure(self, index: int, error: BaseException) -> None:
        """Raises, drops the actor, or replaces it (see ``on_worker_failure``)."""


class WorkerError(RuntimeError):
    """An exception raised by code running inside an actor, with the actor named; made by
    :func:`worker_error`, it is an instance of that exception's type too (an env's
    ``EnvValueError`` is caught as one), and the exception itself is its cause."""


def worker_error(message: str, cause: BaseException) -> WorkerError:
    """The :class:`WorkerError` for ``cause``, raised in an actor (raise it ``from cause``)."""
    return carrying(WorkerError, message, cause)


def task_error(where: str, error: RayTaskError) -> WorkerError:
    """The :class:`WorkerError` for the exception an actor's code raised (``where`` names the
    actor; raise it ``from error.cause``): the exception gets the actor's traceback as its
    cause (:func:`~jaxflow.dataflow.errors.keep_remote_traceback`), and the message names the
    innermost frame of the user's code in it, where there is one (an env's bug: its file and line)."""
    cause = error.cause
    keep_remote_traceback(cause, str(error))
    frame = user_frame(cause)
    return worker_error(f"{where} raised {cause!r}" + (f" at {location(frame)}" if frame else ""), cause)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (Ray's actor errors run over many).

    Example:
        >>> first_line(RuntimeError("The actor died.\\n\\tclass_name: SearchWorker"))
        'The actor died.'
    """
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class ParallelIterator(Generic[T]):
    """One stream per actor; items are produced on the actors and gathered lazily.

    Example:
        >>> grads = ParallelRollouts(workers, mode="raw").par_for_each(ComputeGradients())  # doctest: +SKIP
        >>> first = next(grads.gather_async(num_async=1))  # doctest: +SKIP
    """

    def __init__(
        self,
        source: ActorSource,
        method: str,
        context: FlowContext | _Shared,
        fns: tuple[Callable[..., Any], ...] = (),
        name: str = "ParallelIterator",
    ):
        self.source, self.method, self.fns, self.name = source, method, fns, name
        self._shared = context if isinstance(context, _Shared) else _Shared(context)

    @property
    def context(self) -> FlowContext:
        return self._shared.context

    def par_for_each(self, fn: Callable[[T], U]) -> ParallelIterator[U]:
        """Applies ``fn`` on the actor side to each item (an Operator gets the actor as ``ctx``)."""
        return ParallelIterator(
            self.source, self.method, self._shared, self.fns + (fn,), f"{self.name}.par_for_each({_name(fn)})"
        )

    def batch_across_shards(self) -> LocalIterator[list[T]]:
        """Each pull asks every live actor for one item and returns the list, in actor order."""

        def gen() -> Iterator[list[T]]:
            while True:
                slots = self._live()
                refs = [(i, self.source.submit(h, self.method, self.fns)) for i, h in slots]
                deadline = time.monotonic() + self.source.timeout_s
                items = []
                for i, ref in refs:
                    try:
                        items.append(_reply(ref, max(0.0, deadline - time.monotonic())))
                    except (RayActorError, GetTimeoutError) as e:
                        self.source.on_failure(i, e)
                    except RayTaskError as e:
                        raise task_error(f"{self.name}: actor {i}", e) from e.cause
                if items:
                    yield items

        return LocalIterator(gen, self._shared, f"{self.name}.batch_across_shards()")

    def gather_sync(self) -> LocalIterator[T]:
        """Items of every actor, round by round: all actors' requests of a round complete
        before the next round is sent."""
        return self.batch_across_shards().flatten()

    def gather_async(self, num_async: int = 1) -> LocalIterator[T]:
        """Items in completion order, with at most ``num_async`` requests in flight per actor.

        A finished actor gets its next request when the consumer pulls again, so
        anything the consumer sends it in between (new weights) is applied first.
        """
        if num_async < 1:
            raise ValueError(f"gather_async: num_async must be >= 1, got {num_async}")

        def gen() -> Iterator[T]:
            pending: dict[ray.ObjectRef | Done, tuple[int, Any, float]] = {}
            in_flight: collections.Counter = collections.Counter()
            while not self._shared.stopped.is_set():
                for i, h in self._live(require=not pending):
                    while in_flight[i] < num_async:
                        pending[self.source.submit(h, self.method, self.fns)] = (i, h, time.monotonic())
                        in_flight[i] += 1
                ready = _first_reply(pending, self.source.timeout_s)
                if not ready:
                    now = time.monotonic()
                    for i in {i for i, _, t in pending.values() if now - t >= self.source.timeout_s}:
                        self._forget(pending, in_flight, i)
                        self.source.on_failure(i, GetTimeoutError(f"no reply in {self.source.timeout_s}s"))
                    continue
                i, h, _ = pending.pop(ready[0])
                in_flight[i] -= 1
                try:
                    item = _reply(ready[0])
                except RayActorError as e:
                    self._forget(pending, in_flight, i)
                    self.source.on_failure(i, e)
                    continue
                except RayTaskError as e:
                    raise task_error(f"{self.name}: actor {i}", e) from e.cause
                self.context.current_actor = (i, h)
                yield item

        return LocalIterator(gen, self._shared, f"{self.name}.gather_async({num_async})")

    def _live(self, require: bool = True) -> list[tuple[int, Any]]:
        slots = self.source.live()
        if not slots and require:
            raise RuntimeError(f"{self.name}: no live actors are left to gather from.")
        return slots

    @staticmethod
    def _forget(pending: dict, in_flight: collections.Counter, index: int) -> None:
        for ref in [r for r, (i, _, _) in pending.items() if i == index]:
            del pending[ref]
        in_flight[index] = 0


def _first_reply(pending: dict[ray.ObjectRef | Done, tuple[int, Any, float]], timeout_s: float) -> list[Any]:
    """The oldest reply in hand, else the first of those owed to come in before the oldest
    request has waited ``timeout_s``; ``[]`` if none did."""
    done = [r for r in pending if isinstance(r, Done)]
    if done:
        return done[:1]
    oldest = min(t for _, _, t in pending.values())
    ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, oldest + timeout_s - time.monotonic()))
    return list(ready)


def _reply(ref: ray.ObjectRef | Done, timeout_s: float | None = None) -> Any:
    return ref.value if isinstance(ref, Done) else ray.get(ref, timeout=timeout_s)


class ActorPool:
    """The simplest :class:`ActorSource`: fixed actors, any failure raises.

    Each actor must have a method ``run_chain(method, fns)`` (see ``RolloutWorker``)
    or be used with ``fns=()`` and a plain ``method``.
    """

    def __init__(self, actors: Sequence[Any], timeout_s: float = 60.0):
        self.actors, self.timeout_s = list(actors), timeout_s

    def live(self) -> list[tuple[int, Any]]:
        return list(enumerate(self.actors))

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        if fns:
            return handle.run_chain.remote(method, fns)
        return getattr(handle, method).remote()

    def on_failure(self, index: int, error: BaseException) -> None:
        raise RuntimeError(f"actor {index} failed: {error}") from error


def from_actors(
    actors: Sequence[Any], method: str, context: FlowContext | None = None, timeout_s: float = 60.0
) -> ParallelIterator[Any]:
    """A parallel iterator calling ``method`` on each actor for every item."""
    return ParallelIterator(
        ActorPool(actors, timeout_s), method, context or FlowContext(), name=f"from_actors({method})"
    )


def jax_actor(cls: type, num_gpus: float = 0.0, env_vars: dict[str, str] | None = None, **options: Any) -> Any:
    """``ray.remote(cls)`` with ``options``, for an actor that computes with JAX: on the CPU,
    or with ``num_gpus > 0`` on the (share of a) GPU Ray assigns it.

    A CPU actor's process starts with ``JAX_PLATFORMS=cpu``. Unpickling the actor imports
    jaxflow and with it gymnax, which builds JAX arrays at import, so the platform must be
    chosen before the process runs any Python of ours: on a GPU machine JAX's CUDA plugin
    otherwise claims the GPU in every actor, or fails there ("no supported devices found for
    platform CUDA"). A GPU actor allocates GPU memory as it needs it rather than JAX's
    default 75% of the GPU, since actors share a GPU with each other and with the learner.
    ``env_vars`` are set in its process too, after the settings that share the driver's XLA
    compilation cache (:mod:`jaxflow.dataflow.xla_cache`).

    Example:
        >>> worker = jax_actor(RolloutWorker, num_cpus=1).remote(spec, 0)  # doctest: +SKIP
    """
    platform = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if num_gpus > 0 else {"JAX_PLATFORMS": "cpu"}
    runtime_env = {"env_vars": {**platform, **xla_cache.actor_env(), **(env_vars or {})}}
    return ray.remote(cls).options(runtime_env=runtime_env, num_gpus=num_gpus, **options)


def ship_by_value(obj: Any) -> None:
    """Lets Ray actors unpickle ``obj``'s class although its module is not importable in
    their processes (a user's model in a test file or a script beside the driver): Ray's
    cloudpickle then sends that module's code by value. ``__main__`` is sent by value
    anyway; jaxflow and installed packages stay by reference."""
    module = sys.modules.get(type(obj).__module__)
    if module is not None:
        ship_module_by_value(module)


def ship_module_by_value(module: Any) -> None:
    """Ray actors get ``module``'s code with what they are sent (see :func:`ship_by_value`),
    unless it is ``__main__`` (sent by value anyway), jaxflow's or an installed package's."""
    if module.__name__ == "__main__" or module.__name__.split(".")[0] == "jaxflow":
        return
    if "site-packages" in (getattr(module, "__file__", None) or ""):
        return
    ray.cloudpickle.register_pickle_by_value(module)
