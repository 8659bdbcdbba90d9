"""Sharded prioritized replay on Ray actors, with a sample-to-insert rate limiter.

Each :class:`ReplayShard` wraps one :class:`~jaxflow.replay.PrioritizedReplayBuffer`
(Schaul et al., 2016) and runs as a Ray actor; :class:`ReplayShards` creates N of
them and is the :class:`~jaxflow.dataflow.actors.ActorSource` that ``ParallelReplay``
gathers from. The rate limiter follows Reverb's ``SampleToInsertRatio`` (Cassirer
et al., 2021, "Reverb: A Framework for Experience Replay"): the learner may replay
each inserted item about ``samples_per_insert`` times, give or take
``error_buffer`` items, so that neither the actors nor the learner can run away
from the other and the replay ratio does not depend on their relative speeds.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxflow.dataflow import placement
from jaxflow.dataflow.stored_rows import StoreRows
from jaxflow.replay import transitions
from jaxflow.replay.buffer import PrioritizedReplayBuffer, ReplayRows
from jaxflow.replay.replayed import ReplayBatch

log = logging.getLogger(__name__)


class ReplayShardError(RuntimeError):
    """A replay shard actor died or stopped answering."""


class ReplayShard:
    """One prioritized replay buffer plus a sample-to-insert rate limiter; a Ray actor.

    The limiter is Reverb's ``SampleToInsertRatio`` (Cassirer et al., 2021, "Reverb: A
    Framework for Experience Replay"). With ``R = samples_per_insert`` and
    ``slack = error_buffer`` (in items), counting ``inserted`` and ``sampled`` items
    since the start:

    - ``sample(b)`` is admitted only while ``sampled + b <= R * inserted + slack``
      and at least ``min_size_to_sample`` items are stored;
    - ``add(n items)`` is admitted only while ``R * (inserted + n) - sampled <= slack``
      (inserts wait when the learner falls behind). The check is on the counts *after*
      the call, for both, so ``|sampled - R * inserted| <= slack`` holds at all times
      (the one exception: inserts are never held back while fewer than
      ``min_size_to_sample`` items are stored, since no sample could ever free them).

    Some call is always admissible when ``2 * slack >= R * n + b`` for the insert size
    ``n`` and batch size ``b`` in use; a single call that could never be admitted
    (``R * n > 2 * slack`` or ``b > 2 * slack``) raises ``ValueError`` instead of waiting.
    ``samples_per_insert=None`` turns the limiter off.

    Not-admitted calls never spin. By default (``timeout_s=0``) they answer at once:
    ``sample`` returns ``None`` ("not ready") and ``add`` returns 0 (nothing stored), and
    the caller retries later; that is what makes the limiter testable step by step.
    With ``timeout_s > 0`` the call waits on a ``threading.Condition``, woken by every
    call that moves the counters, for at most that long, then answers the same way.
    Waiting needs a threaded actor (``max_concurrency > 1``; :class:`ReplayShards`
    sets it), so every method takes the one lock.

    Example:
        >>> shard = ReplayShard(capacity=100, seed=0, samples_per_insert=2, error_buffer=20)
        >>> shard.add({"obs": np.zeros((10, 3), np.float32)})
        10
        >>> [shard.sample(16) is None for _ in range(3)]  # the third would make 48 > 2 * 10 + 20
        [False, False, True]
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        seed: int | np.random.SeedSequence = 0,
        index: int = 0,
        samples_per_insert: float | None = None,
        min_size_to_sample: int = 1,
        error_buffer: float = 0.0,
        generation: int = 0,
    ):
        if samples_per_insert is not None and not (np.isfinite(samples_per_insert) and samples_per_insert > 0):
            raise ValueError(f"samples_per_insert must be positive or None, got {samples_per_insert!r}.")
        if min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be >= 1, got {min_size_to_sample}.")
        if not (np.isfinite(error_buffer) and error_buffer >= 0):
            raise ValueError(f"error_buffer must be finite and >= 0, got {error_buffer!r}.")
        self.index, self.generation = index, generation
        self.samples_per_insert = samples_per_insert
        self.min_size_to_sample = min_size_to_sample
        self.error_buffer = float(error_buffer)
        self._buffer: Any = self._new_buffer(capacity, alpha)
        self._rng = np.random.default_rng(seed)
        self._inserted = 0
        self._sampled = 0
        self._refused_inserts = 0
        self._refused_samples = 0
        self._frame_stack: int | None = None
        """Set once the shard holds ReplayRows: their frames per observation."""
        self._cond = threading.Condition()

    def ping(self) -> int:
        return self.generation

    def node_id(self) -> str:
        """The Ray node this shard runs on."""
        return placement.node_id()

    def _new_buffer(self, capacity: int, alpha: float) -> Any:
        """The store: a :class:`PrioritizedReplayBuffer` of items (a subclass may keep another,
        with its own ``_items``, ``_store`` and ``_draw``)."""
        return PrioritizedReplayBuffer(capacity, alpha)

    def _items(self, batch: Mapping[str, Any]) -> int:
        """The items ``batch`` brings, what the rate limiter counts: its leading axis."""
        return len(next(iter(batch.values()))) if batch else 0

    def _store(
        self, batch: Mapping[str, Any], priorities: np.ndarray | None, source: tuple[int, int] | None
    ) -> np.ndarray:
        """Writes ``batch`` into the store; returns its slots. One ring holds every source's items."""
        return self._buffer.add(batch, priorities)

    def _draw(self, batch_size: int, beta: float) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
        """``(items, slots, importance weights)`` drawn from the store."""
        indices, weights = self._buffer.sample_indices(batch_size, self._rng, beta)
        if self._frame_stack:
            return transitions.decode_rows(self._buffer.storage, indices, self._frame_stack), indices, weights
        return {k: v[indices] for k, v in self._buffer.storage.items()}, indices, weights

    def add(
        self,
        batch: Mapping[str, np.ndarray] | ReplayRows,
        priorities: np.ndarray | None = None,
        timeout_s: float = 0.0,
        source: tuple[int, int] | None = None,
    ) -> int:
        """Stores ``batch`` if the limiter admits it; returns the number of items stored,
        or 0 if it was not admitted within ``timeout_s`` seconds (nothing is stored then).

        ``batch`` is ``{field: [n, ...]}`` (n items), or :class:`ReplayRows` packed by a
        worker, whose transitions are then the items (frame-only rows are not counted)
        and are rebuilt into ``obs``/``next_obs`` when sampled. A shard holds one kind.
        ``source`` is ``(actor, times replaced)`` where the caller routes by actor
        (``StoreToReplay(by_actor=True)``): a shard keeping one ring per actor reads it.
        """
        if isinstance(batch, ReplayRows):
            batch, priorities, n = self._accept_rows(batch)
        else:
            n = self._items(batch)
        if self.samples_per_insert is not None and self.samples_per_insert * n > 2 * self.error_buffer:
            raise ValueError(
                f"Replay shard {self.index}: an insert of {n} items with samples_per_insert="
                f"{self.samples_per_insert} can never fit in error_buffer={self.error_buffer}."
            )
        with self._cond:
            if not self._cond.wait_for(lambda: self._can_insert(n), timeout=timeout_s):
                self._refused_inserts += 1
                return 0
            slots = self._store(batch, priorities, source)
            if self._frame_stack and len(self._buffer) == self._buffer.capacity and len(slots):
                stale = transitions.rows_to_invalidate(
                    int(slots[0]), len(slots), self._buffer.capacity, self._frame_stack
                )
                self._buffer.update_priorities(stale, np.zeros(len(stale)))
            self._inserted += n
            self._cond.notify_all()
            return n

    def _accept_rows(self, rows: ReplayRows) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
        if self._frame_stack is None and len(self._buffer) == 0:
            self._frame_stack = rows.frame_stack
        if rows.frame_stack != self._frame_stack:
            raise ValueError(
                f"Replay shard {self.index} holds {'plain items' if self._frame_stack is None else f'rows with frame_stack={self._frame_stack}'}"
                f", not rows with frame_stack={rows.frame_stack}."
            )
        return rows.rows, rows.priorities, rows.num_transitions

    def sample(
        self, batch_size: int, beta: float = 0.4, timeout_s: float = 0.0, store: bool = False
    ) -> ReplayBatch | None:
        """Draws ``batch_size`` items if the limiter admits it; ``None`` if it did not
        within ``timeout_s`` seconds. With ``store``, the items' train rows stay in this
        shard's object store for a learner group's processes to fetch (``StoreRows``)."""
        if self.samples_per_insert is not None and batch_size > 2 * self.error_buffer:
            raise ValueError(
                f"Replay shard {self.index}: a sample of {batch_size} items can never fit in "
                f"error_buffer={self.error_buffer}."
            )
        with self._cond:
            if not self._cond.wait_for(lambda: self._can_sample(batch_size), timeout=timeout_s):
                self._refused_samples += 1
                return None
            data, indices, weights = self._draw(batch_size, beta)
            self._sampled += batch_size
            self._cond.notify_all()
        batch = ReplayBatch(data, indices, weights, self.index, self.generation)
        return StoreRows(ReplayBatch.train_arrays)(batch) if store else batch

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray, generation: int | None = None) -> bool:
        """New priorities (before ``alpha``) for slots returned by :meth:`sample`; ignored
        (returns False) when they were sampled from another ``generation`` of this shard,
        whose slots meant other items."""
        if generation is not None and generation != self.generation:
            return False
        with self._cond:
            self._buffer.update_priorities(indices, priorities)
            return True

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                "index": self.index,
                "size": len(self._buffer),
                "capacity": self._buffer.capacity,
                "inserted": self._inserted,
                "sampled": self._sampled,
                "refused_inserts": self._refused_inserts,
                "refused_samples": self._refused_samples,
                "bytes": self._buffer.nbytes,
            }

    def get_state(self) -> dict[str, Any]:
        """Buffer contents, limiter counters and the sampling generator's state: plain
        numpy arrays, numbers and dicts (no pickled classes), for checkpoints."""
        with self._cond:
            return {
                "buffer": self._buffer.get_state(),
                "inserted": self._inserted,
                "sampled": self._sampled,
                "rng": self._rng.bit_generator.state,
                "frame_stack": self._frame_stack,
            }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s output into a shard of the same capacity and alpha."""
        with self._cond:
            self._buffer.set_state(state["buffer"])
            self._inserted, self._sampled = int(state["inserted"]), int(state["sampled"])
            self._rng.bit_generator.state = state["rng"]
            self._frame_stack = state.get("frame_stack")
            self._cond.notify_all()

    def export_state(self) -> bytes:
        """:meth:`get_state` as the bytes of a numpy ``.npz`` file (arrays as arrays, the rest
        as JSON; no pickles), handed to the driver, which writes it where checkpoints go: no
        shard needs the checkpoint's storage, so shards on other nodes save and restore alike."""
        state = self.get_state()
        # Any values: typed as arrays, the ``**arrays`` would also have to fit savez's ``allow_pickle: bool``.
        arrays: dict[str, Any] = {f"buffer/{k}": v for k, v in state["buffer"].items() if isinstance(v, np.ndarray)}
        scalars = dict(state, buffer={k: v for k, v in state["buffer"].items() if not isinstance(v, np.ndarray)})
        out = io.BytesIO()
        np.savez(out, __meta__=np.frombuffer(json.dumps(scalars).encode(), np.uint8), **arrays)
        return out.getvalue()

    def import_state(self, data: bytes) -> int:
        """Restores bytes made by :meth:`export_state`; returns the number of stored items."""
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            state = json.loads(f["__meta__"].tobytes().decode())
            state["buffer"].update({k[len("buffer/") :]: f[k] for k in f.files if k.startswith("buffer/")})
        self.set_state(state)
        return len(self._buffer)

    def _can_insert(self, n: int) -> bool:
        if self.samples_per_insert is None or len(self._buffer) < self.min_size_to_sample:
            return True
        return self.samples_per_insert * (self._inserted + n) - self._sampled <= self.error_buffer

    def _can_sample(self, batch_size: int) -> bool:
        if len(self._buffer) < self.min_size_to_sample:
            return False
        if self.samples_per_insert is None:
            return True
        return self._sampled + batch_size <= self.samples_per_insert * self._inserted + self.error_buffer
