"""Ray mode's dataflow: worker rounds of adapted episodes, the driver's meta-update, the new
meta-parameters broadcast; and the metrics a meta-iteration records in either mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxflow import ReportMetrics, from_actors
from jaxflow.algorithms.maml.config import MAMLConfig
from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES
from jaxflow.dataflow.iterators import LocalIterator, Operator
from jaxflow.ops.metrics import Context

if TYPE_CHECKING:
    from jaxflow.algorithms.maml.program import MAMLProgram


def record(ctx: Context, out: Mapping[str, np.ndarray]) -> None:
    """Adds K meta-iterations' outputs (leading axis K) to the plan's metrics: post-adaptation
    episodes, env steps (pre and post), meta-updates, the last iteration's statistics."""
    ctx.record_episodes(out["episode_returns"].reshape(-1), out["episode_lengths"].reshape(-1))
    steps = int(out["env_steps"].sum())
    ctx.counters[ENV_STEPS_SAMPLED] += steps
    ctx.counters[ENV_STEPS_TRAINED] += steps
    ctx.counters[NUM_UPDATES] += len(out["env_steps"])
    pre, post = float(out["pre_adaptation_return"][-1]), float(out["post_adaptation_return"][-1])
    ctx.info["learner"] = {k: float(out[k][-1]) for k in ("loss", "grad_norm", "entropy", "inner_step_norm")}
    ctx.info["maml"] = {"pre_adaptation_return": pre, "post_adaptation_return": post, "adaptation_gain": post - pre}


class MetaUpdate(Operator):
    """The driver's meta-update on a round of worker shards (concatenated along tasks)."""

    def __init__(self, program: MAMLProgram):
        self.program = program

    def __call__(self, shards: list[dict[str, Any]], ctx: Context) -> dict[str, np.ndarray]:
        out = self.program.update(jax.tree.map(lambda *xs: np.concatenate(xs), *shards))
        record(ctx, jax.tree.map(lambda x: np.asarray(x)[None], out))
        return out


class BroadcastMetaParams(Operator):
    """The new meta-parameters and the next round's key to every worker."""

    def __init__(self, program: MAMLProgram):
        self.program = program

    def __call__(self, item: Any, ctx: Context) -> Any:
        self.program.broadcast()
        return item


def plan(workers: list[Any], program: MAMLProgram, config: MAMLConfig) -> LocalIterator[dict[str, Any]]:
    """Ray mode's dataflow (built by :class:`MAMLProgram`, not by the Algorithm's learner path)."""
    # (1) a round: each worker draws its tasks, samples with theta, adapts per task, samples with theta'
    rounds = (
        from_actors(workers, "sample", program.context, config.rollout.worker_timeout_s)
        .gather_sync()
        .batch(len(workers))
    )
    # (2) the meta-gradient through the inner step on the driver, then theta to every worker
    train = rounds.for_each(MetaUpdate(program)).for_each(BroadcastMetaParams(program))
    return ReportMetrics(train, None, config.min_env_steps_per_iteration)
