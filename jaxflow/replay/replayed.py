"""What a replay shard hands out: a :class:`ReplayBatch` of drawn items, which is a
:class:`~jaxflow.rollout.batch.Batch` to train on, and the :class:`ReplaySource` its new
priorities go back to."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxflow.dataflow.stored_rows import StoredRows


class ReplayBatch(NamedTuple):
    """Items drawn from one shard, with what is needed to update their priorities later."""

    data: dict[str, np.ndarray] | StoredRows
    """``{field: [batch_size, ...]}`` (for a learner group: those plus the ``weights``, kept in
    the shard's object store for the learner processes to fetch)."""
    indices: np.ndarray
    """Slots in the shard's buffer, for ``update_priorities``."""
    weights: np.ndarray
    """float32 importance weights in (0, 1]."""
    shard: int
    """Index of the shard the items came from."""
    generation: int = 0
    """Which incarnation of that shard: a restarted shard ignores priorities for an earlier one's slots."""

    # The Batch protocol (jaxflow.rollout.batch): replayed items are trained on, not new env steps.
    @property
    def env_steps(self) -> int:
        return 0

    @property
    def weights_version(self) -> int:
        return -1

    @property
    def num_samples(self) -> int:
        return len(self.indices)

    @property
    def replay_source(self) -> ReplaySource:
        return ReplaySource(self.shard, self.indices, self.generation)

    def train_arrays(self) -> dict[str, Any]:
        """Its fields plus the importance ``weights`` (stored ones as they are: a group fetches them)."""
        if isinstance(self.data, StoredRows):
            return self.data  # type: ignore[return-value]
        return dict(self.data, weights=self.weights)

    def replay_rows(self) -> Any:
        return self.data


class ReplaySource(NamedTuple):
    """Where replayed items lie: a shard, its slots, and the shard's incarnation."""

    shard: int
    indices: np.ndarray
    generation: int
