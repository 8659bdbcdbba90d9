"""The source of a device-mode plan: each compiled call's metrics, recorded on the host."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES
from jaxflow.dataflow.iterators import LocalIterator, from_iterator
from jaxflow.ondevice.guards import ENV_NONFINITE_FIELDS
from jaxflow.ops.metrics import Context
from jaxflow.rollout.episode_hooks import EpisodeEnd, call_episode_hooks

NOT_LEARNER_STATISTICS = ("episode_returns", "episode_lengths", "trained", *ENV_NONFINITE_FIELDS)
"""A call's metrics that are not the learner's statistics."""

if TYPE_CHECKING:
    from jaxflow.ondevice.program import DeviceProgram


def OnDevice(program: DeviceProgram) -> LocalIterator[dict[str, np.ndarray]]:
    """The source of a device-mode plan: each item is one compiled call of
    ``iterations_per_call`` iterations of every member, recorded in the plan's metrics
    (env steps sampled and trained, updates, episodes per member, mean learner statistics, and
    the metrics the run's ``on_episode_end`` callbacks return for the episodes that ended).

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
            if program.episode_hooks:  # the user's on_episode_end, on the host, once per ended episode
                ctx.record_episode_metrics(call_episode_hooks(program.episode_hooks, ended_episodes(out)))
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


def ended_episodes(out: Mapping[str, np.ndarray]) -> list[EpisodeEnd]:
    """The episodes one compiled call ended, member after member, each member's in the order
    they ended (iteration, step, env): as ``on_episode_end`` is given them in device mode, with
    no worker and no ``info``.

    >>> nan = float("nan")  # one member, one iteration of 2 steps of 2 envs
    >>> out = {"episode_returns": np.array([[[[nan, 5.0], [2.0, nan]]]]),
    ...        "episode_lengths": np.array([[[[0, 5], [2, 0]]]])}
    >>> [(e.env_index, e.episode_return, e.length) for e in ended_episodes(out)]
    [(1, 5.0, 5), (0, 2.0, 2)]
    """
    episodes = []
    for returns, lengths in zip(out["episode_returns"], out["episode_lengths"]):  # [K, T, B] per member
        returns, lengths = returns.reshape(-1, returns.shape[-1]), lengths.reshape(-1, lengths.shape[-1])
        steps, envs = np.nonzero(~np.isnan(returns))
        episodes += [
            EpisodeEnd(None, int(b), float(returns[t, b]), int(lengths[t, b]), None) for t, b in zip(steps, envs)
        ]
    return episodes
