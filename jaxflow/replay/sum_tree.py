"""A batched sum-tree over priorities: updated and searched level by level, one numpy
operation per level for a whole batch.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Sums and minima over ``size`` non-negative leaf values, with batched updates and searches.

    A complete binary tree stored in flat arrays: node ``k`` has children ``2k`` and
    ``2k + 1``, the root is node 1, and the leaves are the last ``2^depth`` nodes
    (padding leaves beyond ``size`` hold zero). Internal nodes are always recomputed
    from their children rather than adjusted by differences, so no rounding error
    accumulates over many updates and the tree is a function of its leaves alone.
    """

    def __init__(self, size: int):
        if size <= 0:
            raise ValueError(f"SumTree size must be positive, got {size}.")
        self.size = int(size)
        self._base = 1 << (self.size - 1).bit_length()
        self._depth = self._base.bit_length() - 1
        self._sum = np.zeros(2 * self._base, np.float64)
        # Zero leaves count as +inf, so the root holds the smallest *positive* leaf: the
        # least likely item that can still be drawn, which normalizes importance weights.
        self._min = np.full(2 * self._base, np.inf)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest positive leaf; ``inf`` when every leaf is zero."""
        return float(self._min[1])

    @property
    def leaves(self) -> np.ndarray:
        """The ``size`` leaf values, as a read-only view."""
        view = self._sum[self._base : self._base + self.size]
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        return self._sum.nbytes + self._min.nbytes

    def get(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._sum[np.asarray(indices) + self._base]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Sets ``leaves[indices] = values``; for a repeated index the last value wins,
        exactly as if the writes were made one at a time. Values must be finite and >= 0."""
        indices = np.asarray(indices, np.int64)
        if indices.size == 0:
            return
        # Unique over the reversed array finds each index's last occurrence, and sorts
        # the indices, so that parents shared within the batch end up adjacent.
        nodes, first_in_reversed = np.unique(indices[::-1], return_index=True)
        values = np.asarray(values, np.float64)[::-1][first_in_reversed]
        nodes = nodes + self._base
        self._sum[nodes] = values
        self._min[nodes] = np.where(values > 0, values, np.inf)
        for _ in range(self._depth):
            nodes = nodes >> 1
            nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]
            left, right = 2 * nodes, 2 * nodes + 1
            self._sum[nodes] = self._sum[left] + self._sum[right]
            self._min[nodes] = np.minimum(self._min[left], self._min[right])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each value ``m`` in ``[0, total)``, the leaf ``i`` with
        ``sum(leaves[:i]) <= m < sum(leaves[:i + 1])``; never a zero leaf while ``total > 0``."""
        mass = np.asarray(mass, np.float64)
        nodes = np.ones(mass.shape, np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._sum[left]
            # After subtracting left sums, rounding can leave `mass` at or past the end of
            # a subtree whose right part is empty; stepping right there would land on a
            # zero leaf, so only ever step into a child with positive mass.
            go_right = (mass >= left_sum) & (self._sum[left + 1] > 0)
            mass = np.where(go_right, mass - left_sum, mass)
            nodes = left + go_right
        return nodes - self._base
