"""Prioritized experience replay as a pure numpy data structure.

Implements proportional prioritization from Schaul et al., 2016, "Prioritized
Experience Replay" (ICLR): item ``i`` is drawn with probability
``P(i) = p_i^alpha / sum_j p_j^alpha`` and its loss is scaled by the importance
weight ``w_i = (N * P(i))^-beta / max_j w_j``. There is no Ray here, so a
replay-shard actor can wrap :class:`PrioritizedReplayBuffer`, and everything
below can be checked with plain numpy in a unit test. Anneal ``beta`` with
``optax.linear_schedule(0.4, 1.0, total_updates)`` (section 3.4 of the paper).

Every operation is batched: the sum-tree is updated and searched level by level,
one numpy operation per level for the whole batch, so a call costs
``O(log2(capacity))`` numpy calls however large the batch is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxflow.replay.checks import check_batch, check_priorities
from jaxflow.replay.sum_tree import SumTree

_DATA_PREFIX = "data/"
UNIFORM_REDRAWS = 8
"""With ``alpha = 0``, rounds of redrawing the slots that fell on a row of priority 0 before
the sum-tree draws the rest (rows of priority 0 are few: frames kept for their neighbours)."""


class ReplayRows(NamedTuple):
    """Transitions packed as ring-buffer rows by ``jaxflow.replay.transitions.encode_fragment``:
    each observation stored once, frame stacks as single frames. Rows of priority 0
    hold frames only and are never sampled."""

    rows: dict[str, np.ndarray]
    """``{field: [R, ...]}``, written to consecutive slots in this order."""
    priorities: np.ndarray
    """``[R]``: positive for the rows that carry a transition, 0 for the others."""
    frame_stack: int
    """Frames per observation (1: observations are stored whole)."""

    @property
    def num_transitions(self) -> int:
        return int(np.count_nonzero(self.priorities))

    @staticmethod
    def concatenate(parts: Sequence[ReplayRows]) -> ReplayRows:
        """One block of rows from several; each part's pointers stay within its own rows."""
        return ReplayRows(
            {k: np.concatenate([p.rows[k] for p in parts]) for k in parts[0].rows},
            np.concatenate([p.priorities for p in parts]),
            parts[0].frame_stack,
        )


class PrioritizedReplayBuffer:
    """A capacity-bounded ring of transitions sampled in proportion to ``priority^alpha``.

    Proportional prioritized replay of Schaul et al., 2016, "Prioritized Experience
    Replay". Transitions are dicts of numpy arrays with a leading batch axis; storage
    for each field is allocated on the first :meth:`add` with that field's dtype and
    trailing shape (``uint8`` frames stay ``uint8``), and the oldest items are
    overwritten once ``capacity`` is reached.

    Conventions:

    - ``alpha`` is applied when a priority is stored; the tree holds ``p^alpha``.
    - A priority of exactly 0 means "never sample", for every ``alpha`` (including
      ``alpha = 0``, where the other items are drawn uniformly). Callers that want every
      item reachable add a small epsilon to ``|TD error|``, as the paper does.
    - New items without explicit priorities get the largest priority seen so far
      (initially 1.0), so every new transition is replayed soon (Schaul et al., Alg. 1).
    - Draws are i.i.d. from ``P`` (not the paper's stratified segments): a batch is then
      an exact multinomial sample in random order, which the statistical tests rely on.
    - Importance weights are normalized by the largest weight over the whole buffer,
      computed from the smallest positive stored probability (kept by a min-tree beside
      the sum-tree), so they lie in (0, 1] and do not depend on which batch was drawn.

    Example:
        >>> buffer = PrioritizedReplayBuffer(capacity=4, alpha=0.6)
        >>> slots = buffer.add({"obs": np.zeros((3, 2), np.uint8), "reward": np.ones(3, np.float32)})
        >>> batch, indices, weights = buffer.sample(2, np.random.default_rng(0), beta=0.4)
        >>> batch["obs"].dtype, batch["obs"].shape, weights.shape
        (dtype('uint8'), (2, 2), (2,))
        >>> buffer.update_priorities(indices, np.array([0.5, 2.0]))
        >>> len(buffer), buffer.bytes_per_transition
        (3, 6)
    """

    def __init__(self, capacity: int, alpha: float = 0.6):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}.")
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}.")
        self._capacity = int(capacity)
        self.alpha = float(alpha)
        self._tree = SumTree(self._capacity)
        self._storage: dict[str, np.ndarray] = {}
        self._size = 0
        self._next = 0
        self._max_priority = 1.0

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_priority(self) -> float:
        """The priority given to items added without one: the largest seen so far, at least 1."""
        return self._max_priority

    @property
    def tree(self) -> SumTree:
        """The sum-tree over ``priority^alpha``, for inspection (e.g. ``tree.total``); do not mutate."""
        return self._tree

    @property
    def storage(self) -> Mapping[str, np.ndarray]:
        """The ring's arrays ``{field: [capacity, ...]}``, e.g. to rebuild an item from
        neighbouring slots; empty before the first add. Do not mutate."""
        return self._storage

    @property
    def bytes_per_transition(self) -> int:
        """Bytes one stored transition takes, summed over its fields (0 before the first add)."""
        return sum(v[0].nbytes for v in self._storage.values())

    @property
    def nbytes(self) -> int:
        """Bytes this buffer holds: transition storage, allocated for the full capacity on
        the first add, plus the sum- and min-trees."""
        return sum(v.nbytes for v in self._storage.values()) + self._tree.nbytes

    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray | None = None) -> np.ndarray:
        """Stores a batch of transitions, overwriting the oldest once full; returns their slots.

        Args:
            batch: ``{field: array [n, ...]}``, the same fields as every earlier add.
            priorities: ``[n]`` finite, non-negative priorities (before ``alpha``);
                ``None`` gives every item :attr:`max_priority`.

        Raises:
            ValueError: for invalid priorities, unequal leading sizes, or fields, trailing
                shapes or dtypes that do not match the stored ones. Nothing is stored then.
        """
        arrays = check_batch(batch, self._storage)
        n = next(iter(arrays.values())).shape[0]
        p = np.full(n, self._max_priority) if priorities is None else check_priorities(priorities, n)
        if n == 0:
            return np.zeros(0, np.int64)
        if not self._storage:
            self._storage = {k: np.zeros((self._capacity,) + v.shape[1:], v.dtype) for k, v in arrays.items()}
        # Of a batch longer than the ring only the last `capacity` items would survive
        # adding one at a time, so only those are written (slots then stay distinct).
        skip = max(n - self._capacity, 0)
        slots = (self._next + skip + np.arange(n - skip)) % self._capacity
        for k, v in arrays.items():
            self._storage[k][slots] = v[skip:]
        self._tree.update(slots, self._mass(p[skip:]))
        self._max_priority = max(self._max_priority, float(p.max()))
        self._next = (self._next + n) % self._capacity
        self._size = min(self._size + n, self._capacity)
        return slots

    def sample(
        self, batch_size: int, rng: np.random.Generator, beta: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Draws ``batch_size`` items i.i.d. with probability ``P(i)``, with replacement.

        Returns:
            ``(batch, indices, weights)``: the transitions ``{field: [batch_size, ...]}``,
            their slots (for :meth:`update_priorities`), and float32 importance weights
            ``(N P(i))^-beta / max_j (N P(j))^-beta`` in (0, 1]; ``beta = 0`` gives ones.

        Raises:
            ValueError: if no stored item has a positive priority, or for a bad argument.
        """
        indices, weights = self.sample_indices(batch_size, rng, beta)
        return {k: v[indices] for k, v in self._storage.items()}, indices, weights

    def sample_indices(self, batch_size: int, rng: np.random.Generator, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`sample`, but returns only ``(indices, weights)``, for callers that
        read the items themselves from :attr:`storage`."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}.")
        if not (np.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be finite and >= 0, got {beta!r}.")
        total = self._tree.total
        if total <= 0:
            raise ValueError(f"Cannot sample: none of the {self._size} stored items has a positive priority.")
        if self.alpha == 0:
            return self._uniform_indices(batch_size, rng), np.ones(batch_size, np.float32)
        indices = self._tree_draws(batch_size, rng)
        # N and the normalizer sum(p^alpha) cancel in the ratio to the largest weight. Logs,
        # because the ratio of two masses can overflow float64; the floor keeps the contract
        # w > 0 where float32 would round a vanishing weight to 0.
        log_ratio = np.log(self._tree.get(indices)) - np.log(self._tree.min)
        weights = np.exp(-beta * log_ratio).astype(np.float32)
        return indices, np.maximum(weights, np.finfo(np.float32).tiny)

    def _uniform_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``alpha = 0``: every positive priority's mass is 1, so ``P`` is uniform over those
        slots; uniform slots, redrawn where they hold a row of priority 0, cost a twentieth of
        the sum-tree's search of a million slots (SAC's and TD3's uniform replay)."""
        indices = rng.integers(0, self._size, batch_size)
        for _ in range(UNIFORM_REDRAWS):
            missed = np.flatnonzero(self._tree.get(indices) == 0)
            if missed.size == 0:
                return indices
            indices[missed] = rng.integers(0, self._size, missed.size)
        missed = np.flatnonzero(self._tree.get(indices) == 0)
        indices[missed] = self._tree_draws(missed.size, rng)
        return indices

    def _tree_draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` slots drawn i.i.d. in proportion to the sum-tree's masses."""
        total = self._tree.total
        # random() is in [0, 1), but the product can round up to `total` itself.
        return self._tree.find(np.minimum(rng.random(n) * total, np.nextafter(total, 0.0)))

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Sets new priorities (before ``alpha``) for stored slots, e.g. ``|TD error| + eps``.

        For a slot repeated in ``indices`` the last priority wins, as with sequential updates.

        Raises:
            ValueError: for NaN, infinite or negative priorities, or mismatched shapes.
            IndexError: for a slot outside ``[0, len(self))``.
            Nothing is updated when either is raised.
        """
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise ValueError(f"indices must be a 1-D integer array, got {idx.dtype} with shape {idx.shape}.")
        p = check_priorities(priorities, idx.shape[0])
        outside = np.flatnonzero((idx < 0) | (idx >= self._size))
        if outside.size:
            raise IndexError(
                f"{outside.size} indices are outside the {self._size} stored items (first: {idx[outside[0]]})."
            )
        if idx.size == 0:
            return
        self._tree.update(idx, self._mass(p))
        self._max_priority = max(self._max_priority, float(p.max()))

    def get_state(self) -> dict[str, Any]:
        """A copy of the contents as numpy arrays and numbers, for checkpoints.

        Stored items always occupy slots ``[0, len)``, so only those are saved; each field
        is under ``"data/<field>"``.
        """
        state: dict[str, Any] = {
            "capacity": self._capacity,
            "alpha": self.alpha,
            "size": self._size,
            "next_index": self._next,
            "max_priority": self._max_priority,
            "masses": self._tree.leaves[: self._size].copy(),
        }
        for k, v in self._storage.items():
            state[_DATA_PREFIX + k] = v[: self._size].copy()
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`get_state`'s output into a buffer of the same capacity and alpha.

        The trees are rebuilt from the stored leaves, which reproduces them bit for bit,
        so sampling afterwards with the same generator gives the same draws.
        """
        capacity, alpha = int(state["capacity"]), float(state["alpha"])
        if capacity != self._capacity or alpha != self.alpha:
            raise ValueError(
                f"State of a buffer with capacity {capacity}, alpha {alpha} cannot be loaded into one with "
                f"capacity {self._capacity}, alpha {self.alpha}."
            )
        size, next_index = int(state["size"]), int(state["next_index"])
        if not (0 <= size <= capacity and 0 <= next_index < capacity):
            raise ValueError(f"Inconsistent state: size {size}, next_index {next_index}, capacity {capacity}.")
        masses = check_priorities(state["masses"], size)
        data = {k[len(_DATA_PREFIX) :]: np.asarray(v) for k, v in state.items() if k.startswith(_DATA_PREFIX)}
        for k, v in data.items():
            if v.ndim == 0 or v.shape[0] != size:
                raise ValueError(f"Inconsistent state: field {k!r} has shape {v.shape} for {size} items.")
        tree = SumTree(capacity)
        tree.update(np.arange(size), masses)
        storage = {}
        for k, v in data.items():
            storage[k] = np.zeros((capacity,) + v.shape[1:], v.dtype)
            storage[k][:size] = v
        self._tree, self._storage = tree, storage
        self._size, self._next = size, next_index
        self._max_priority = float(state["max_priority"])

    def _mass(self, priorities: np.ndarray) -> np.ndarray:
        # Masked rather than 0.0 ** alpha, which is 1 for alpha = 0: a zero priority must stay undrawable.
        return np.power(priorities, self.alpha, out=np.zeros_like(priorities), where=priorities > 0)
