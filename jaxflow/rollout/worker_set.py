"""The rollout workers of a run as Ray actors: created together, given weights through the
object store, replaced or dropped when they die.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from jaxflow import envs
from jaxflow.config.constants import ACTOR_STOP_TIMEOUT_S, GRACEFUL_EXIT_S, MAX_START_ATTEMPTS, STARTUP_TIMEOUT_S
from jaxflow.config.fields import ConfigError
from jaxflow.config.groups import RolloutConfig
from jaxflow.dataflow.actors import Done, first_line, jax_actor
from jaxflow.dataflow.placement import Placement, check_placeable, driver_node_id, lost_with_its_node
from jaxflow.rollout.normalize import Normalizer, normalizer_merge
from jaxflow.rollout.worker import RolloutWorker

log = logging.getLogger(__name__)


class WorkerCrashedError(RuntimeError):
    """A rollout worker died (or hung) and ``on_worker_failure="raise"``."""


class _InDriver:
    """Stands in for an actor handle when sampling happens in the driver (num_workers=0)."""

    def __init__(self, worker: RolloutWorker):
        self.worker = worker


class WorkerSet:
    """The rollout workers of a run: created together, given weights through the object
    store (one ``ray.put``, many readers), and replaced or dropped when they die.

    It is the :class:`~jaxflow.dataflow.actors.ActorSource` behind ``ParallelRollouts``.
    """

    def __init__(self, spec: Any, weights: Any, version: Any = 0, worker_cls: type | None = None):
        cfg = spec.config
        self.spec, self.config = spec, cfg
        self.worker_cls = worker_cls or RolloutWorker
        # Multi-agent workers take each policy's weights on their own and keep the rest.
        self._merge = getattr(self.worker_cls, "merge_weights", lambda old, new: new)
        self._weights = self._version = None
        self.normalizer: Normalizer | None = None  # the run's statistics, merged by sync_normalizers
        self.timeout_s = cfg.rollout.worker_timeout_s
        self.num_restarts = 0
        # A plan thread may be restarting a worker while the driver stops the set: the lock and
        # the flag keep the new actor from outliving the run (and holding its CPU).
        self._lock = threading.Lock()
        self._stopped = False
        # Restarted workers still starting: index -> (handle, its first ping, when it failed, attempt).
        self._starting: dict[int, tuple[Any, ray.ObjectRef, float, int]] = {}
        self._startup_s = max(self.timeout_s, STARTUP_TIMEOUT_S)
        self._incarnation: dict[int, int] = {}
        self._slots: dict[int, Any] = {}
        if cfg.rollout.num_workers == 0:
            self._slots[0] = _InDriver(self.worker_cls(spec, 0))
        else:
            self.placement = worker_placement(cfg.rollout)
            check_worker_room(cfg.rollout)
            self._actor_cls = jax_actor(self.worker_cls, max_restarts=0, **self.placement.options())
            for i in range(cfg.rollout.num_workers):
                self._slots[i] = self._create(i)
            self._check_started(list(self._slots.items()))
        self.sync_weights(weights, version)

    def _create(self, index: int) -> Any:
        incarnation = self._incarnation.get(index, -1) + 1
        self._incarnation[index] = incarnation
        return self._actor_cls.remote(self.spec, index, incarnation, envs.custom_entry(self.config.env))

    def _check_started(self, slots: list[tuple[int, Any]]) -> None:
        # Start-up (a new process importing JAX) may take longer than a reply to sample().
        for i, h in slots:
            try:
                ray.get(h.ping.remote(), timeout=self._startup_s)
            except ray.exceptions.RayError as e:
                raise WorkerCrashedError(f"rollout worker {i} failed to start: {e}") from e

    @property
    def local_worker(self) -> RolloutWorker | None:
        """The in-driver worker when ``num_workers == 0``, else None."""
        slot = self._slots.get(0)
        return slot.worker if isinstance(slot, _InDriver) else None

    @property
    def num_healthy(self) -> int:
        return len(self._slots)

    def live(self) -> list[tuple[int, Any]]:
        """The workers that answer requests. A restarted worker joins once it has started;
        with no other worker left, this waits for it."""
        if self._starting:
            self._admit_started(wait=False)
        while self._starting and not self._slots:
            self._admit_started(wait=True)
        return sorted(self._slots.items(), key=lambda s: s[0])

    def _admit_started(self, wait: bool) -> None:
        with self._lock:
            starting = {ref: (i, h, since, attempt) for i, (h, ref, since, attempt) in self._starting.items()}
        if not starting:
            return
        # A wait wakes up by placement_timeout_s, to name a worker no live node can hold.
        timeout = self.config.rollout.placement_timeout_s if wait else 0.0
        ready, _ = ray.wait(list(starting), num_returns=1 if wait else len(starting), timeout=timeout)
        for ref in ready:
            i, h, since, attempt = starting[ref]
            try:
                ray.get(ref)
            except ray.exceptions.RayError as e:
                if lost_with_its_node(e) and attempt < MAX_START_ATTEMPTS:
                    self._start(i, since, attempt + 1)  # placed on a node that was leaving: placed again
                    continue
                raise WorkerCrashedError(f"rollout worker {i} failed to restart: {e}") from e
            h.set_weights.remote(ray.put(self._weights), self._version)
            if self.normalizer is not None:  # it normalizes as the others do from its first step
                h.set_normalizer.remote(self.normalizer)
            with self._lock:
                if self._stopped or self._starting.get(i, (None,))[0] is not h:
                    continue  # stopped meanwhile, or admitted by another thread
                del self._starting[i]
                self._slots[i] = h
                self.num_restarts += 1
            log.warning("rollout worker %d restarted (restart #%d)", i, self.num_restarts)
        for ref, (i, _, since, _) in starting.items():
            if ref not in ready:
                waited = time.monotonic() - since
                check_placeable(self.placement, f"rollout worker {i}", waited, self.config.rollout.placement_timeout_s)
                if waited > self._startup_s:
                    raise WorkerCrashedError(f"rollout worker {i} failed to restart: it did not answer after start-up.")

    def node_ids(self) -> dict[int, str | None]:
        """The Ray node each live worker runs on, by worker index (the in-driver worker's is
        None in a run that never started Ray)."""
        slots = sorted(self._slots.items(), key=lambda s: s[0])
        return {i: driver_node_id() if isinstance(h, _InDriver) else ray.get(h.node_id.remote()) for i, h in slots}

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef | Done:
        if isinstance(handle, _InDriver):  # sampled here: the fragment stays out of the object store
            return Done(handle.worker.run_chain(method, fns))
        return handle.run_chain.remote(method, fns)

    def sync_weights(self, weights: Any, version: Any) -> None:
        """Sends ``weights`` to every worker: one object-store put, read by all."""
        self._weights, self._version = self._merge(self._weights, weights), self._merge(self._version, version)
        ref = ray.put(weights) if any(not isinstance(h, _InDriver) for h in self._slots.values()) else None
        for h in self._slots.values():
            if isinstance(h, _InDriver):
                h.worker.set_weights(weights, version)
            else:
                h.set_weights.remote(ref, version)

    def set_weights_of(self, index: int, weights: Any, version: Any) -> None:
        """Sends ``weights`` to worker ``index`` alone (A3C); they also become the
        weights a restarted worker starts from."""
        self._weights, self._version = self._merge(self._weights, weights), self._merge(self._version, version)
        h = self._slots.get(index)
        if isinstance(h, _InDriver):
            h.worker.set_weights(weights, version)
        elif h is not None:
            h.set_weights.remote(weights, version)

    def sync_normalizers(self) -> Normalizer | None:
        """Merges every worker's normalizer statistics since the last sync into the run's
        and sends the result back to all of them; returns the run's statistics. A worker
        that does not answer is left to the plan, which meets its failure on its next call."""
        deltas: list[Normalizer | None] = []
        remote = []
        for i, h in self.live():
            if isinstance(h, _InDriver):
                deltas.append(h.worker.pop_normalizer())
            else:
                remote.append((i, h.pop_normalizer.remote()))
        for i, ref in remote:
            try:
                deltas.append(ray.get(ref, timeout=self.timeout_s))
            except (ray.exceptions.RayError, TimeoutError) as e:
                log.warning("rollout worker %d sent no normalizer statistics (%s)", i, e)
        for delta in filter(None, deltas):
            self.normalizer = delta if self.normalizer is None else normalizer_merge(self.normalizer, delta)
        self.set_normalizers(self.normalizer)
        return self.normalizer

    def set_normalizers(self, stats: Normalizer | None) -> None:
        """Sends the run's normalizer statistics to every worker (after a restore, or a sync)."""
        self.normalizer = stats
        if stats is None:
            return
        ref = ray.put(stats) if any(not isinstance(h, _InDriver) for h in self._slots.values()) else None
        for h in self._slots.values():
            if isinstance(h, _InDriver):
                h.worker.set_normalizer(stats)
            else:
                h.set_normalizer.remote(ref)

    def on_failure(self, index: int, error: BaseException) -> None:
        mode = self.config.rollout.on_worker_failure
        if mode == "raise":
            raise WorkerCrashedError(
                f"rollout worker {index} died or stopped answering: {type(error).__name__}: {first_line(error)}. "
                "Set on_worker_failure='restart' to recreate it or 'ignore' to continue without it."
            ) from error
        with self._lock:
            if self._stopped:
                return
            old = self._slots.pop(index)
        if not isinstance(old, _InDriver):
            ray.kill(old, no_restart=True)
        if mode == "ignore":
            log.warning(
                "rollout worker %d failed (%s); continuing with %d workers", index, first_line(error), len(self._slots)
            )
            return
        self._start(index, time.monotonic())
        log.warning("rollout worker %d failed (%s); restarting it", index, first_line(error))

    def _start(self, index: int, since: float, attempt: int = 1) -> None:
        # The others go on sampling while it starts (a new process importing JAX): see live().
        new = self._create(index)
        with self._lock:
            if self._stopped:
                ray.kill(new, no_restart=True)
                return
            self._starting[index] = (new, new.ping.remote(), since, attempt)

    def stop(self) -> None:
        """Kills the worker actors and waits (up to 30 s) until they are gone, so the next
        run in this process finds their CPUs free."""
        with self._lock:
            self._stopped = True
            slots = list(self._slots.values()) + [h for h, *_ in self._starting.values()]
            self._slots.clear()
            self._starting.clear()
        actors = [h for h in slots if not isinstance(h, _InDriver)]
        for h in slots:
            if isinstance(h, _InDriver):
                h.worker.close()
        # Asked to exit first, after the call in hand (weights being set, a fragment being
        # sampled): a kill while the actor waits for a call's arguments makes the raylet log a
        # "Failed to send wait complete" error into the user's console or notebook.
        for h in actors:
            h.__ray_terminate__.remote()
        lingering = _still_there(actors, GRACEFUL_EXIT_S)
        for h in lingering:
            ray.kill(h, no_restart=True)
        _still_there(lingering, ACTOR_STOP_TIMEOUT_S)


def worker_placement(rollout: RolloutConfig) -> Placement:
    """What each rollout worker asks Ray's scheduler for, from the rollout settings."""
    return Placement(
        rollout.num_cpus_per_worker,
        rollout.num_gpus_per_worker,
        rollout.custom_resources_per_worker,
        rollout.placement_strategy,
    )


def check_worker_room(rollout: RolloutConfig) -> None:
    """Raises :class:`ConfigError` unless the Ray cluster has room for the rollout workers now
    (their GPUs, and their resources on live nodes): Ray would queue actors that cannot be
    placed forever; this says so instead."""
    if rollout.num_workers:
        _check_gpus(rollout.num_workers, rollout.num_gpus_per_worker)
        worker_placement(rollout).check_room(
            rollout.num_workers, f"rollout workers (num_workers={rollout.num_workers})"
        )


def _check_gpus(num_workers: int, per_worker: float) -> None:
    """Raises :class:`ConfigError` unless the cluster has the workers' GPUs, with the setting that would fit."""
    gpus, have = num_workers * per_worker, ray.cluster_resources().get("GPU", 0)
    if gpus > have:
        raise ConfigError(
            f"num_workers={num_workers} x num_gpus_per_worker={per_worker} needs {gpus:g} "
            f"GPUs but the Ray cluster has {have:g}; set num_gpus_per_worker=0 to act on the workers' CPUs"
            + (f", or at most {have / num_workers:g} for the workers to share the GPUs there are." if have else ".")
        )


def _still_there(actors: list[Any], timeout_s: float) -> list[Any]:
    """The actors whose ping (sent after everything asked of them) has no reply after
    ``timeout_s``, all waited for together: the others have exited (their pings failed)."""
    if not actors:  # ray.wait would start (or join) a Ray for nothing: a run without workers has none
        return []
    pings = [h.ping.remote() for h in actors]
    ready, _ = ray.wait(pings, num_returns=len(pings), timeout=timeout_s)
    return [h for h, p in zip(actors, pings) if p not in ready]
