"""N replay shard actors, the :class:`~jaxflow.dataflow.actors.ActorSource` that
``ParallelReplay`` gathers from, saved and restored with checkpoints.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import ray

from jaxflow.config.constants import MAX_START_ATTEMPTS, STARTUP_TIMEOUT_S
from jaxflow.dataflow.actors import first_line, jax_actor
from jaxflow.dataflow.placement import Placement, lost_with_its_node, wait_placed
from jaxflow.replay.saved import RECORD_KEY, check_fits, read_bytes, shard_path, summary, write_atomic
from jaxflow.replay.shard import ReplayShard, ReplayShardError

log = logging.getLogger(__name__)


class ReplayShards:
    """N :class:`ReplayShard` actors; the :class:`~jaxflow.dataflow.actors.ActorSource` of ``ParallelReplay``.

    Shards go where ``placement`` puts them: by default they take no CPU from Ray's
    scheduler, so they never keep a rollout worker from starting; a shard that no live
    node can hold (its node left) ends the run after ``placement_timeout_s``, naming
    what it needs. Each has its own generator, seeded from ``seed``
    through ``SeedSequence.spawn`` so the shards' draws are independent.
    ``batch_size``, ``beta`` (a number, or a function of nothing evaluated per
    request, for annealing) and ``sample_wait_s`` are what a ``"sample"`` request asks
    for; :meth:`sampling` gives a view with other values over the same actors. A shard
    waits up to ``sample_wait_s`` for the rate limiter before answering "not ready", so
    a starved reader waits in the shard rather than polling it; keep it well below
    ``timeout_s``, after which a silent shard counts as failed.

    ``shard_cls`` (a :class:`ReplayShard` subclass keeping another store, e.g. R2D2's sequence
    rings) is built with ``shard_options`` as keyword arguments besides the shard's own.

    :meth:`save` and :meth:`load` write and read every shard's contents beside a learner
    checkpoint. With ``on_failure="restart"`` a dead shard is recreated and reloaded
    from the last checkpoint saved or loaded (empty if there was none), also while a load
    is under way; with ``"raise"`` its failure ends the run, in one line naming it.

    Example:
        >>> shards = ReplayShards(4, capacity=100_000, samples_per_insert=8, error_buffer=1000)  # doctest: +SKIP
        >>> ray.get(shards.actors[0].stats.remote())["size"]                                     # doctest: +SKIP
        0
    """

    def __init__(
        self,
        num_shards: int,
        capacity: int,
        alpha: float = 0.6,
        seed: int = 0,
        samples_per_insert: float | None = None,
        min_size_to_sample: int = 1,
        error_buffer: float = 0.0,
        batch_size: int = 32,
        beta: float | Callable[[], float] = 0.4,
        sample_wait_s: float = 0.1,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        on_failure: str = "raise",
        placement: Placement | None = None,
        placement_timeout_s: float = 60.0,
        shard_cls: type[ReplayShard] = ReplayShard,
        shard_options: Mapping[str, Any] | None = None,
    ):
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}.")
        if on_failure not in ("raise", "restart"):
            raise ValueError(f"on_failure must be 'raise' or 'restart', got {on_failure!r}.")
        self.batch_size, self.beta, self.sample_wait_s, self.timeout_s = batch_size, beta, sample_wait_s, timeout_s
        self.store = False
        self.on_failure_mode = on_failure
        # Shared with the views made by sampling(), whichever of them sees a failure.
        self._recovery: dict[str, Any] = {
            "restore_from": None,
            "num_restarts": 0,
            "restored_sizes": {},
            "restored_checkpoints": {},
        }
        # The plan's threads may meet one dead shard at once: one of them recreates it (views share the lock).
        self._failure_lock = threading.Lock()
        self.placement, self.placement_timeout_s = placement or Placement(), placement_timeout_s
        self.placement.check_room(num_shards, f"replay shards (num_replay_shards={num_shards})")
        # Threaded, so that a waiting sample or add leaves the shard free to serve the call that unblocks it.
        self._actor_cls = jax_actor(shard_cls, max_concurrency=max_concurrency, **self.placement.options())
        self._options = dict(shard_options or {})
        self._seeds = np.random.SeedSequence(seed).spawn(num_shards)
        self._args = (capacity, alpha, samples_per_insert, min_size_to_sample, error_buffer)
        self._generations = [0] * num_shards
        # The replay operators' flushes of their calls in flight (shared with the views).
        self._settlers: list[Callable[[], None]] = []
        self.actors: list[Any] = [self._create(i) for i in range(num_shards)]

    @property
    def num_shards(self) -> int:
        return len(self.actors)

    @property
    def num_restarts(self) -> int:
        return self._recovery["num_restarts"]

    @property
    def restored_sizes(self) -> dict[int, int]:
        """Items each restarted shard got back from the checkpoint, by shard index (the last restart)."""
        return dict(self._recovery["restored_sizes"])

    @property
    def restored_checkpoints(self) -> dict[int, str | None]:
        """The checkpoint each restarted shard was reloaded from (None: none yet), by shard index (the last restart)."""
        return dict(self._recovery["restored_checkpoints"])

    @property
    def restore_from(self) -> str | None:
        """Checkpoint directory a restarted shard reloads from: the last one saved to
        (once its caller calls :meth:`saved_at`) or loaded from."""
        return self._recovery["restore_from"]

    def saved_at(self, directory: str) -> None:
        """Records that a checkpoint written by :meth:`save` now lives at ``directory``."""
        self._recovery["restore_from"] = directory

    def settle_before_saving(self, flush: Callable[[], None]) -> None:
        """Registers ``flush``, which waits for the calls to these shards an operator still has
        in flight (stores, priority updates): :meth:`settle` calls it before every checkpoint."""
        self._settlers.append(flush)

    def settle(self) -> None:
        """Waits for every call in flight that an operator registered with
        :meth:`settle_before_saving`, so that a checkpoint's counters (counted as replies come
        in) and the shards' contents agree: a threaded shard could otherwise export its
        contents before stores in flight reach it, or after them but before they are counted."""
        for flush in self._settlers:
            flush()

    def _create(self, i: int, generation: int = 0) -> Any:
        capacity, alpha, spi, min_size, slack = self._args
        return self._actor_cls.remote(
            capacity, alpha, self._seeds[i], i, spi, min_size, slack, generation, **self._options
        )

    def sampling(
        self,
        batch_size: int,
        beta: float | Callable[[], float],
        sample_wait_s: float | None = None,
        store: bool = False,
    ) -> ReplayShards:
        """A view over the same actors whose ``"sample"`` requests use these values (with
        ``store``: the shards keep the rows for a learner group, see ``ReplayShard.sample``)."""
        view = copy.copy(self)
        view.batch_size, view.beta, view.store = batch_size, beta, store
        if sample_wait_s is not None:
            view.sample_wait_s = sample_wait_s
        return view

    def live(self) -> list[tuple[int, Any]]:
        return list(enumerate(self.actors))

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        if fns:
            raise ValueError(
                "ReplayShards: par_for_each is not supported; transform batches with for_each after gathering."
            )
        if method == "sample":
            beta = self.beta() if callable(self.beta) else self.beta
            stored = {"store": True} if self.store else {}  # R2D2's sequence shards take no store
            return handle.sample.remote(self.batch_size, float(beta), self.sample_wait_s, **stored)
        return getattr(handle, method).remote()

    def on_failure(self, index: int, error: BaseException) -> None:
        if self.on_failure_mode == "raise":
            raise ReplayShardError(
                f"replay shard {index} failed: {first_line(error)}. Set on_worker_failure='restart' to recreate it "
                "from the last checkpoint."
            ) from error
        with self._failure_lock:
            self._restart(index, error)

    def _restart(self, index: int, error: BaseException) -> None:
        if not self.actors:  # stopped: nothing to bring back
            return
        try:
            # Requests that were in flight to a shard already replaced fail too; its replacement answers.
            ray.get(self.actors[index].ping.remote(), timeout=min(10.0, self.timeout_s))
            return
        except ray.exceptions.RayError:
            pass
        ray.kill(self.actors[index], no_restart=True)
        new = self._start(index)
        source = self.restore_from  # read once: a checkpoint may be written meanwhile
        path = shard_path(source, index) if source and os.path.exists(shard_path(source, index)) else None
        restored = ray.get(new.import_state.remote(read_bytes(path)), timeout=self.timeout_s) if path else 0
        # Counted before the new handle is published, so whoever sees the handle sees its restore.
        self._recovery["num_restarts"] += 1
        self._recovery["restored_sizes"][index] = restored
        self._recovery["restored_checkpoints"][index] = source if path else None
        self.actors[index] = new
        log.warning(
            "replay shard %d failed (%s); restarted it with %d items from %s", index, error, restored, path or "nothing"
        )

    def _start(self, index: int) -> Any:
        """A new shard ``index``, placed on a node that is left (named if none can hold it)."""
        what, attempt = f"replay shard {index}", 1
        while True:
            self._generations[index] += 1
            new = self._create(index, self._generations[index])
            try:
                wait_placed(new.ping.remote(), self.placement, what, STARTUP_TIMEOUT_S, self.placement_timeout_s)
                return new
            except ray.exceptions.RayError as e:
                if not lost_with_its_node(e) or attempt == MAX_START_ATTEMPTS:
                    raise
                log.warning("%s died as it started (%s); creating it again", what, e)
                attempt += 1

    def save(self, directory: str) -> dict[str, list[dict[str, int]]]:
        """Writes every shard's contents under ``directory``; returns what ``meta.json``
        records of them: ``{RECORD_KEY: [{"size", "capacity"}, ...]}`` in shard order.

        The shards hand their contents to this process (all at once, through Ray's object
        store), which writes the files: ``directory`` need only be reachable from here, not
        from the nodes the shards run on. With ``on_failure="restart"`` a shard that died
        since its last request is recreated (from the last checkpoint) and saved. The calls
        still in flight are settled first (:meth:`settle`).
        """
        self.settle()
        refs = [a.export_state.remote() for a in self.actors]
        return {RECORD_KEY: [self._saved(directory, i, ref) for i, ref in enumerate(refs)]}

    def _saved(self, directory: str, index: int, ref: ray.ObjectRef) -> dict[str, int]:
        try:
            data = ray.get(ref, timeout=self.timeout_s)
        except ray.exceptions.RayActorError as error:
            self.on_failure(index, error)  # raises unless restarting
            data = ray.get(self.actors[index].export_state.remote(), timeout=self.timeout_s)
        write_atomic(shard_path(directory, index), data)
        return summary(data)

    def load(self, directory: str) -> list[int]:
        """Restores every shard from files written by :meth:`save`; returns their sizes.

        The files must be this run's number of shards, of its capacity (checked here, in one
        line, before any shard takes them). A shard that dies while loading is, with
        ``on_failure="restart"``, recreated and loaded from the same files.
        """
        check_fits(directory, len(self.actors), self._args[0])
        self.saved_at(directory)  # from now on a restarted shard reloads these files
        refs = [a.import_state.remote(read_bytes(shard_path(directory, i))) for i, a in enumerate(self.actors)]
        return [self._loaded(directory, i, ref) for i, ref in enumerate(refs)]

    def _loaded(self, directory: str, index: int, ref: ray.ObjectRef) -> int:
        try:
            return int(ray.get(ref, timeout=self.timeout_s))
        except ray.exceptions.RayActorError as error:
            if self.on_failure_mode == "raise":
                raise ReplayShardError(
                    f"replay shard {index} died while loading {shard_path(directory, index)}: {first_line(error)}. "
                    "Set on_worker_failure='restart' to recreate it from the checkpoint."
                ) from error
            self.on_failure(index, error)
            return self._recovery["restored_sizes"][index]

    def node_ids(self) -> list[str]:
        """The Ray node each shard runs on, in shard order."""
        return ray.get([a.node_id.remote() for a in self.actors], timeout=self.timeout_s)

    def stats(self) -> list[dict[str, Any]]:
        """Every shard's :meth:`ReplayShard.stats`, in shard order."""
        return ray.get([a.stats.remote() for a in self.actors], timeout=self.timeout_s)

    def stop(self) -> None:
        # After a restart in progress, so that its new shard is killed too.
        with self._failure_lock:
            for actor in self.actors:
                ray.kill(actor)
            # Cleared in place, so that views made by sampling() see the shards gone too.
            self.actors.clear()
