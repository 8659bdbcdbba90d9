"""Several algorithms on one set of rollout workers: each policy of a multi-agent run trains
with its own algorithm's sub-flows, fed its own agents' experiences (Liang et al., 2021,
"RLlib Flow", Figure 9: PPO and DQN policies trained together).

The single-agent plans are reused, not copied: each algorithm page exposes the sub-flows of
its plan as functions, and its ``multiagent_flow`` puts them on a stream of one policy's
fragments.
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, Concurrently, ParallelRollouts, ReportMetrics, RunHooks, register_algorithm
from jaxflow.algorithms.multiagent.config import MultiAgentConfig, load_multiagent_config
from jaxflow.algorithms.multiagent.program import MultiAgentProgram
from jaxflow.ops.multiagent_ops import SelectExperiences, round_robin_weights


def plan(workers, policies, config: MultiAgentConfig):
    # (1) every worker samples all of its agents in lockstep; one copy of the stream per policy
    streams = ParallelRollouts(workers, mode="bulk_sync").duplicate(len(policies))
    # (2) each policy's algorithm trains on its own agents' experiences (PPO: SGD epochs every train
    #     batch; DQN: store every round, replay at its ratio), and broadcasts only its own weights
    flows = [
        flow
        for stream, (pid, p) in zip(streams, policies.items())
        for flow in p.spec.run.flow(stream.for_each(SelectExperiences([pid], config.metrics_num_episodes)), p)
    ]
    # (3) round robin, each sub-flow weighted by its outputs per round so all keep pace with sampling
    train = Concurrently(
        [f for f, _ in flows], mode="round_robin", round_robin_weights=round_robin_weights([rate for _, rate in flows])
    )
    return ReportMetrics(train, workers, config.min_env_steps_per_iteration)


MULTIAGENT = register_algorithm(
    AlgorithmSpec("MULTIAGENT", MultiAgentConfig, loss=None, plan=plan, run=RunHooks(program=MultiAgentProgram))
)

__all__ = ["MULTIAGENT", "MultiAgentConfig", "MultiAgentProgram", "load_multiagent_config", "plan"]
