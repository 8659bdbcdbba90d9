"""The source of a device-mode plan: each compiled call's metrics, recorded on the host."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES
from jaxflow.dataflow.iterators import LocalIterator, from_iterator
from jaxflow.ondevice.guards import ENV_NONFINITE_FIELDS
from jaxflow.ops.metrics import Context

NOT_LEARNER_STATISTICS = ("episode_returns", "episode_lengths", "trained", *ENV_NONFINITE_FIELDS)
"""A call's metrics that are not the learner's statistics."""

if TYPE_CHECKING:
    from jaxflow.ondevice.program import DeviceProgram


def OnDevice(program: DeviceProgram) -> LocalIterator[dict[str, np.ndarray]]:
    """The source of a device-mode plan: each item is one compiled call of
    ``iterations_per_call`` iterations of every member, recorded in the plan's metrics
    (env steps sampled and trained, updates, episodes per member, mean learner statistics).

    Example:
        >>> results = ReportMetrics(OnDevice(program), None)  # doctest: +SKIP
    """
    config = program.config
    names = [m.name for m in program.members] if len(program.members) > 1 else []
    ctx = Context(num_episodes=config.metrics_num_episodes, member_names=names)

    def gen() -> Iterator[dict[str, np.ndarray]]:
        while True:
            out = program.call()
            for i in range(len(program.members)):
                returns, lengths = out["episode_returns"][i].reshape(-1), out["episode_lengths"][i].reshape(-1)
                ended = ~np.isnan(returns)
                ctx.record_episodes(returns[ended], lengths[ended], member=i if names else None)
            trained = out["trained"][0]  # members train in lockstep
            ctx.counters[ENV_STEPS_SAMPLED] += len(trained) * program.steps_per_iteration
            ctx.counters[ENV_STEPS_TRAINED] += int(trained.sum())
            ctx.counters[NUM_UPDATES] += int(np.count_nonzero(trained))
            # The last iteration's statistics, averaged over members (NaN before a replay learner starts).
            last = {k: v[:, -1] for k, v in out.items() if k not in NOT_LEARNER_STATISTICS}
            ctx.info["learner"] = {k: float(np.mean(v)) for k, v in last.items()}
            if program.pbt is not None:  # each member's lineage and hyperparameters
                ctx.info["pbt"] = program.pbt.report(program.state)
            yield out

    return from_iterator(gen, ctx, "OnDevice")
