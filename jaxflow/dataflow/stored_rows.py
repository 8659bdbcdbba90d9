"""Train rows that go from the rollout workers straight to a learner group's processes.

With a :class:`~jaxflow.learn.group.LearnerGroup`, each rollout worker turns its fragment
into the learner's rows itself (``StoreRows``, actor side), puts them in its node's object
store and sends the driver only a reference and the fragment's statistics. The driver joins
references (``ConcatBatches``), splits the global batch's row range among the learner
processes in proportion to their devices (:func:`pieces`), and each process fetches its
rows straight from the workers' nodes (:func:`fetch_rows`): no fragment passes through the
driver. Fields to standardize (PPO's advantages) are standardized with the global batch's
mean and standard deviation, from each process's sums (:func:`moments`, :func:`combine`).

The global batch is the concatenation of the fragments' rows in the order they were
joined, which a single learner given those rows would train on to the same update.

A worker owns the rows it stored (Ray 2.56 removed ``ray.put``'s ``_owner``): if it dies
before the learners fetched them, they are gone. Every process then reports the loss before
any of them starts the update, and the group skips that batch together (``BATCHES_LOST``
counts them) rather than leave the others waiting in a collective.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import ray

from jaxflow.dataflow.iterators import Operator

BATCHES_LOST = "learner_batches_lost"
"""Counter, and update metric: batches a learner group skipped because a worker that stored
some of their rows died before the learners fetched them."""

STD_EPS = 1e-8
"""Added to the standard deviation, as ``StandardizeFields`` adds it."""


class StoredRows(NamedTuple):
    """A batch's rows in the object store: one reference per fragment, with its row count."""

    refs: tuple[ray.ObjectRef, ...]
    """Each fragment's rows ``{field: [n_i, ...]}`` (or replay rows on their way to a shard)."""
    counts: tuple[int, ...]
    """Rows of each fragment."""
    samples: int
    """The batch's ``num_samples`` (env steps, or replay items) that the rows are made of."""
    standardize: tuple[str, ...] = ()
    """Fields the learner standardizes over the whole batch before training on it."""

    @property
    def num_rows(self) -> int:
        return sum(self.counts)

    @staticmethod
    def concatenate(parts: Sequence[StoredRows]) -> StoredRows:
        return StoredRows(
            tuple(r for p in parts for r in p.refs),
            tuple(c for p in parts for c in p.counts),
            sum(p.samples for p in parts),
            parts[0].standardize,
        )


class StoreRows(Operator):
    """Actor side: a batch's learner rows (``to_host(batch)``: flat fields, or the replay rows
    a shard stores) into the object store; the batch that goes on carries
    :class:`StoredRows` as its data, and its statistics. ``None`` (a shard that had nothing
    to hand out) passes.

    Example:
        >>> ParallelRollouts(workers, "async", to_learner=group)  # appends StoreRows(to_host)  # doctest: +SKIP
    """

    def __init__(self, to_host: Callable[[Any], Mapping[str, Any]]):
        self.to_host = to_host

    def __call__(self, batch: Any, ctx: Any = None) -> Any:
        if batch is None:
            return None
        rows = self.to_host(batch)
        count = rows.num_transitions if hasattr(rows, "num_transitions") else len(next(iter(rows.values())))
        return batch._replace(data=StoredRows((ray.put(rows),), (count,), batch.num_samples))


class Piece(NamedTuple):
    """Rows ``[start, stop)`` of one stored fragment."""

    ref: ray.ObjectRef
    start: int
    stop: int


def pieces(stored: StoredRows, shares: Sequence[int]) -> list[list[Piece]]:
    """Each process's pieces of the global row range: consecutive blocks in process order,
    ``shares[i]`` rows for process ``i``."""
    if sum(shares) != stored.num_rows:
        raise ValueError(f"shares {list(shares)} do not add up to the batch's {stored.num_rows} rows")
    starts = list(itertools.accumulate(stored.counts, initial=0))
    bounds = list(itertools.accumulate(shares, initial=0))
    out: list[list[Piece]] = []
    for lo, hi in itertools.pairwise(bounds):
        mine = []
        for ref, a, n in zip(stored.refs, starts, stored.counts):
            start, stop = max(lo, a), min(hi, a + n)
            if start < stop:
                mine.append(Piece(ref, start - a, stop - a))
        out.append(mine)
    return out


def fetch_rows(mine: Sequence[Piece]) -> dict[str, np.ndarray] | None:
    """A process's rows: its pieces fetched (from whichever node holds them) and joined;
    None if some are lost (their worker died)."""
    try:
        fragments = ray.get([p.ref for p in mine])
    except ray.exceptions.ObjectLostError:  # OwnerDiedError among them
        return None
    return {k: np.concatenate([f[k][p.start : p.stop] for f, p in zip(fragments, mine)]) for k in fragments[0]}


def moments(rows: Mapping[str, np.ndarray], fields: Sequence[str]) -> dict[str, tuple[int, float, float]]:
    """Count, sum and sum of squares (float64) of each field, for :func:`combine`."""
    out = {}
    for f in fields:
        x = np.asarray(rows[f], np.float64)
        out[f] = (x.size, float(x.sum()), float(np.square(x).sum()))
    return out


def combine(parts: Sequence[Mapping[str, tuple[int, float, float]]]) -> dict[str, tuple[float, float]]:
    """Each field's mean and standard deviation over all processes' rows."""
    out = {}
    for f in parts[0]:
        n, s, ss = (sum(p[f][i] for p in parts) for i in range(3))
        mean = s / n
        out[f] = (mean, float(np.sqrt(max(ss / n - mean * mean, 0.0))))
    return out


def standardized(rows: Mapping[str, np.ndarray], stats: Mapping[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    """``rows`` with each field of ``stats`` shifted and scaled by the global mean and std."""
    out = dict(rows)
    for f, (mean, std) in stats.items():
        x = out[f]
        out[f] = ((x - mean) / (std + STD_EPS)).astype(x.dtype)
    return out
