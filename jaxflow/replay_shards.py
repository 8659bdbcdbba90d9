"""Sharded prioritized replay on Ray actors, with a sample-to-insert rate limiter.

Each :class:`ReplayShard` wraps one :class:`~jaxflow.replay.PrioritizedReplayBuffer`
(Schaul et al., 2016) and runs as a Ray actor; :class:`ReplayShards` creates N of
them and is the :class:`~jaxflow.iterators.ActorSource` that ``ParallelReplay``
gathers from. The rate limiter follows Reverb's ``SampleToInsertRatio`` (Cassirer
et al., 2021, "Reverb: A Framework for Experience Replay"): the learner may replay
each inserted item about ``samples_per_insert`` times, give or take
``error_buffer`` items, so that neither the actors nor the learner can run away
from the other and the replay ratio does not depend on their relative speeds.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import ray

from jaxflow.replay import PrioritizedReplayBuffer


class ReplayBatch(NamedTuple):
    """Items drawn from one shard, with what is needed to update their priorities later."""

    data: dict[str, np.ndarray]
    """``{field: [batch_size, ...]}``."""
    indices: np.ndarray
    """Slots in the shard's buffer, for ``update_priorities``."""
    weights: np.ndarray
    """float32 importance weights in (0, 1]."""
    shard: int
    """Index of the shard the items came from."""


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
    ):
        if samples_per_insert is not None and not (np.isfinite(samples_per_insert) and samples_per_insert > 0):
            raise ValueError(f"samples_per_insert must be positive or None, got {samples_per_insert!r}.")
        if min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be >= 1, got {min_size_to_sample}.")
        if not (np.isfinite(error_buffer) and error_buffer >= 0):
            raise ValueError(f"error_buffer must be finite and >= 0, got {error_buffer!r}.")
        self.index = index
        self.samples_per_insert = samples_per_insert
        self.min_size_to_sample = min_size_to_sample
        self.error_buffer = float(error_buffer)
        self._buffer = PrioritizedReplayBuffer(capacity, alpha)
        self._rng = np.random.default_rng(seed)
        self._inserted = 0
        self._sampled = 0
        self._refused_inserts = 0
        self._refused_samples = 0
        self._cond = threading.Condition()

    def ping(self) -> bool:
        return True

    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray | None = None, timeout_s: float = 0.0) -> int:
        """Stores ``batch`` (``{field: [n, ...]}``) if the limiter admits it; returns ``n``,
        or 0 if it was not admitted within ``timeout_s`` seconds (nothing is stored then)."""
        n = len(next(iter(batch.values()))) if batch else 0
        if self.samples_per_insert is not None and self.samples_per_insert * n > 2 * self.error_buffer:
            raise ValueError(
                f"Replay shard {self.index}: an insert of {n} items with samples_per_insert="
                f"{self.samples_per_insert} can never fit in error_buffer={self.error_buffer}."
            )
        with self._cond:
            if not self._cond.wait_for(lambda: self._can_insert(n), timeout=timeout_s):
                self._refused_inserts += 1
                return 0
            self._buffer.add(batch, priorities)
            self._inserted += n
            self._cond.notify_all()
            return n

    def sample(self, batch_size: int, beta: float = 0.4, timeout_s: float = 0.0) -> ReplayBatch | None:
        """Draws ``batch_size`` items if the limiter admits it; ``None`` if it did not
        within ``timeout_s`` seconds."""
        if self.samples_per_insert is not None and batch_size > 2 * self.error_buffer:
            raise ValueError(
                f"Replay shard {self.index}: a sample of {batch_size} items can never fit in "
                f"error_buffer={self.error_buffer}."
            )
        with self._cond:
            if not self._cond.wait_for(lambda: self._can_sample(batch_size), timeout=timeout_s):
                self._refused_samples += 1
                return None
            data, indices, weights = self._buffer.sample(batch_size, self._rng, beta)
            self._sampled += batch_size
            self._cond.notify_all()
            return ReplayBatch(data, indices, weights, self.index)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities (before ``alpha``) for slots returned by :meth:`sample`."""
        with self._cond:
            self._buffer.update_priorities(indices, priorities)

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
            }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s output into a shard of the same capacity and alpha."""
        with self._cond:
            self._buffer.set_state(state["buffer"])
            self._inserted, self._sampled = int(state["inserted"]), int(state["sampled"])
            self._rng.bit_generator.state = state["rng"]
            self._cond.notify_all()

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


class ReplayShards:
    """N :class:`ReplayShard` actors; the :class:`~jaxflow.iterators.ActorSource` of ``ParallelReplay``.

    Shards take no CPU from Ray's scheduler (``num_cpus=0``), so they never keep a
    rollout worker from starting; each has its own generator, seeded from ``seed``
    through ``SeedSequence.spawn`` so the shards' draws are independent.
    ``batch_size``, ``beta`` and ``sample_wait_s`` are what a ``"sample"`` request
    asks for; :meth:`sampling` gives a view with other values over the same actors.
    A shard waits up to ``sample_wait_s`` for the rate limiter before answering "not
    ready", so a starved reader waits in the shard rather than polling it; keep it
    well below ``timeout_s``, after which a silent shard counts as failed.

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
        beta: float = 0.4,
        sample_wait_s: float = 0.1,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
    ):
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}.")
        self.batch_size, self.beta, self.sample_wait_s, self.timeout_s = batch_size, beta, sample_wait_s, timeout_s
        # Threaded, so that a waiting sample or add leaves the shard free to serve the call that unblocks it.
        actor_cls = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=max_concurrency)
        seeds = np.random.SeedSequence(seed).spawn(num_shards)
        self.actors: list[Any] = [
            actor_cls.remote(capacity, alpha, seeds[i], i, samples_per_insert, min_size_to_sample, error_buffer)
            for i in range(num_shards)
        ]

    def sampling(self, batch_size: int, beta: float) -> ReplayShards:
        """A view over the same actors whose ``"sample"`` requests use these values."""
        view = copy.copy(self)
        view.batch_size, view.beta = batch_size, beta
        return view

    def live(self) -> list[tuple[int, Any]]:
        return list(enumerate(self.actors))

    def submit(self, handle: Any, method: str, fns: tuple[Callable[..., Any], ...]) -> ray.ObjectRef:
        if fns:
            raise ValueError("ReplayShards: par_for_each is not supported; transform batches with for_each after gathering.")
        if method == "sample":
            return handle.sample.remote(self.batch_size, self.beta, self.sample_wait_s)
        return getattr(handle, method).remote()

    def on_failure(self, index: int, error: BaseException) -> None:
        raise ReplayShardError(f"replay shard {index} failed: {error}") from error

    def stats(self) -> list[dict[str, Any]]:
        """Every shard's :meth:`ReplayShard.stats`, in shard order."""
        return ray.get([a.stats.remote() for a in self.actors], timeout=self.timeout_s)

    def stop(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        # Cleared in place, so that views made by sampling() see the shards gone too.
        self.actors.clear()
