"""A Ray-mode generation's population, played in shares by whichever
:class:`~jaxflow.algorithms.es.rollouts.SearchWorker` actors are alive.

The offsets are cut into ``num_workers`` shares of consecutive pairs, always the same cut,
whatever the number of live workers: a share is played in one call, its episodes seeded by
its pairs' places in the population
(:func:`~jaxflow.algorithms.es.rollouts.member_seeds`), so its returns and observation
moments are the same bit for bit whichever worker plays it, and gathered in share order
the generation's update is too. A worker that dies or does not answer within
``worker_timeout_s`` is handed to the :class:`~jaxflow.rollout.worker_set.WorkerSet`
(``on_worker_failure``: raise, drop it, or start a new one), and its share goes back to be
played by the next live worker free: one that already runs takes it at once, rather than the
generation waiting for a new process to import JAX (a restarted worker joins the next share
it is free for, as rollout workers join their sampling).
"""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from jaxflow.dataflow.actors import task_error
from jaxflow.rollout.normalize import Moments
from jaxflow.rollout.worker_set import WorkerCrashedError, WorkerSet

JOIN_POLL_S = 1.0
"""How often a generation whose shares wait for a free worker looks for a restarted one that has joined."""

Share = dict[str, Any]
"""One share's reply: ``returns_pos``, ``returns_neg``, ``lengths`` (``+`` then ``-``), ``moments``, ``seconds``."""


def evaluate_shares(workers: WorkerSet, offsets: np.ndarray, generation: int, norm: Moments | None) -> list[Share]:
    """Every share of ``offsets`` played once by a live worker (one share in flight per
    worker), the replies in share order. The workers hold generation ``generation``'s
    ``theta`` (``WorkerSet.sync_weights``); a worker restarted meanwhile is given it as it joins.

    Example:
        >>> workers.sync_weights(theta, 3)                      # doctest: +SKIP
        >>> shares = evaluate_shares(workers, offsets, 3, None)  # doctest: +SKIP
    """
    count = workers.config.rollout.num_workers
    cut = np.split(offsets, count)
    todo = collections.deque(range(count))
    done: dict[int, Share] = {}
    pending: dict[ray.ObjectRef, tuple[int, int, float]] = {}  # reply -> (share, worker, sent at)
    while todo or pending:
        busy = {i for _, i, _ in pending.values()}
        for i, handle in workers.live():
            if todo and i not in busy:
                s = todo.popleft()
                reply = handle.evaluate.remote(cut[s], s * len(cut[s]), generation, norm)
                pending[reply] = (s, i, time.monotonic())
        if not pending:
            raise WorkerCrashedError(
                f"every rollout worker has failed and on_worker_failure='ignore' left none to play generation "
                f"{generation}; set on_worker_failure='restart' to recreate them."
            )
        poll_s = JOIN_POLL_S if todo else None  # shares waiting: a restarted worker may join meanwhile
        for s, i, error in _failures(pending, done, workers.timeout_s, poll_s):
            workers.on_failure(i, error)  # raises, drops or restarts worker i
            todo.append(s)
    return [done[s] for s in range(count)]


def _failures(
    pending: dict[ray.ObjectRef, tuple[int, int, float]],
    done: dict[int, Share],
    timeout_s: float,
    poll_s: float | None,
) -> list[tuple[int, int, BaseException]]:
    """Waits for the first reply (or until the oldest call has waited ``timeout_s``, or at
    most ``poll_s``), moves the replies in hand from ``pending`` to ``done``, and returns the
    calls that failed: ``(share, worker, error)`` for a dead worker's, and for those ``timeout_s`` old."""
    oldest = min(sent for _, _, sent in pending.values())
    wait_s = max(0.0, oldest + timeout_s - time.monotonic())
    ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s if poll_s is None else min(wait_s, poll_s))
    failed: list[tuple[int, int, BaseException]] = []
    for reply in ready:
        s, i, _ = pending.pop(reply)
        try:
            done[s] = ray.get(reply)
        except RayTaskError as e:  # the worker's own code raised (an env's error): no retry helps
            raise task_error(f"rollout worker {i}", e) from e.cause
        except RayActorError as e:
            failed.append((s, i, e))
    now = time.monotonic()
    for reply, (s, i, sent) in list(pending.items()):
        if now - sent >= timeout_s:
            del pending[reply]
            failed.append((s, i, GetTimeoutError(f"no reply from rollout worker {i} in {timeout_s:g}s")))
    return failed
