"""Replay in the driver's process: one :class:`~jaxflow.replay.shard.ReplayShard` called
directly, for runs where nothing in another process reads or writes the replay.

With ``num_workers=0`` the driver samples, stores, replays and sends priorities itself, so a
shard actor only adds a round trip through Ray per call (pickling each batch both ways); a
profile of SAC on Pendulum put 10-16% of the driver's time there. :class:`LocalReplay` has
the interface of :class:`~jaxflow.replay.shards.ReplayShards` that plans, the replay
operators and checkpoints use, and writes the same checkpoint files.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxflow.dataflow import placement
from jaxflow.replay.replayed import ReplayBatch
from jaxflow.replay.saved import RECORD_KEY, check_fits, read_bytes, shard_path, summary, write_atomic
from jaxflow.replay.shard import ReplayShard


def replay_in_driver(config: Any) -> bool:
    """Whether ``config``'s replay lives in the driver's process: the config asks for it
    (``replay_in_driver=True``) or the driver samples (``num_workers=0``), and either way one
    shard holds it all and asks Ray for no resources (CPUs or custom ones would place it where
    they are, maybe on another node)."""
    return (
        (config.rollout.num_workers == 0 or config.replay_in_driver)
        and config.num_replay_shards == 1
        and config.num_cpus_per_replay_shard == 0
        and not config.custom_resources_per_replay_shard
    )


class LocalReplay:
    """One :class:`ReplayShard` in this process, behind :class:`ReplayShards`' interface.

    Its shard (a ``shard_cls`` built with ``shard_options``, as :class:`ReplayShards` builds
    its actors) is seeded as shard 0 of ``ReplayShards(1, seed=seed)``, so it draws the same
    items; ``save`` and ``load`` write and read the same ``replay_shard_0.npz``, so a
    checkpoint moves between the two. The replay operators call :attr:`shard` directly
    (``StoreToReplay``, ``UpdatePriorities``) or through :meth:`sample` (``ParallelReplay``),
    and it needs no ``timeout_s``: no call to it can go unanswered.
    Nothing here can die apart from the driver, so nothing is ever restarted.

    Example:
        >>> replay = LocalReplay(capacity=100, batch_size=4)
        >>> replay.shard.add({"obs": np.zeros((10, 3), np.float32)})
        10
        >>> replay.sample().data["obs"].shape
        (4, 3)
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        seed: int = 0,
        samples_per_insert: float | None = None,
        min_size_to_sample: int = 1,
        error_buffer: float = 0.0,
        batch_size: int = 32,
        beta: float | Callable[[], float] = 0.4,
        sample_wait_s: float = 0.0,
        shard_cls: type[ReplayShard] = ReplayShard,
        shard_options: Mapping[str, Any] | None = None,
    ):
        self.capacity = capacity
        (shard_seed,) = np.random.SeedSequence(seed).spawn(1)
        self.shard = shard_cls(
            capacity,
            alpha,
            shard_seed,
            0,
            samples_per_insert,
            min_size_to_sample,
            error_buffer,
            **(shard_options or {}),
        )
        self.batch_size, self.beta, self.sample_wait_s = batch_size, beta, sample_wait_s

    @property
    def num_shards(self) -> int:
        return 1

    def sampling(
        self, batch_size: int, beta: float | Callable[[], float], sample_wait_s: float | None = None
    ) -> LocalReplay:
        """A view over the same shard whose :meth:`sample` uses these values."""
        view = copy.copy(self)
        view.batch_size, view.beta = batch_size, beta
        if sample_wait_s is not None:
            view.sample_wait_s = sample_wait_s
        return view

    def sample(self) -> ReplayBatch | None:
        """``batch_size`` items at the current ``beta``, or None while the shard cannot answer
        within ``sample_wait_s`` (too few items, or its rate limiter holds back)."""
        beta = self.beta() if callable(self.beta) else self.beta
        return self.shard.sample(self.batch_size, float(beta), self.sample_wait_s)

    def settle(self) -> None:
        """Nothing to wait for: every call to the shard is answered in the call."""

    def saved_at(self, directory: str) -> None:
        """Nothing to remember: only a shard actor, restarted, reloads its last checkpoint."""

    def save(self, directory: str) -> dict[str, list[dict[str, int]]]:
        """Writes the shard's contents under ``directory``; returns what ``meta.json`` records
        of them, as :meth:`ReplayShards.save` does."""
        data = self.shard.export_state()
        write_atomic(shard_path(directory, 0), data)
        return {RECORD_KEY: [summary(data)]}

    def load(self, directory: str) -> list[int]:
        """Restores the shard from a file written by :meth:`save` (or by ``ReplayShards(1)``),
        checked first against its capacity, in one line."""
        check_fits(directory, 1, self.capacity)
        return [self.shard.import_state(read_bytes(shard_path(directory, 0)))]

    def node_ids(self) -> list[str | None]:
        """The Ray node of this process, the shard's (None in a run that never started Ray)."""
        return [placement.driver_node_id()]

    def stats(self) -> list[dict[str, Any]]:
        """``[ReplayShard.stats()]``, as :meth:`ReplayShards.stats` has it."""
        return [self.shard.stats()]

    def stop(self) -> None:
        """Nothing runs apart from the driver: the buffer goes with this object."""
