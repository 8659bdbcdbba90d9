"""A multi-agent run as a program: one learner (and replay) per policy, one set of workers."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from jaxflow import envs
from jaxflow.algorithms.multiagent.config import MultiAgentConfig
from jaxflow.api.ray_program import build_learner, init_ray, stop_run
from jaxflow.api.spaces import check_spaces
from jaxflow.config.fields import require
from jaxflow.dataflow.actors import ship_by_value
from jaxflow.ops.multiagent_ops import PolicySlot, PolicyWorkers
from jaxflow.policies.policy import Policy
from jaxflow.replay.saved import RECORD_KEY
from jaxflow.rollout.evaluation import evaluate_policies
from jaxflow.rollout.multiagent import MultiAgentRolloutWorker, MultiAgentWorkerSpec
from jaxflow.rollout.normalize import refuse_normalization
from jaxflow.rollout.worker import WorkerSpec
from jaxflow.rollout.worker_set import WorkerSet

log = logging.getLogger(__name__)


class ReplaySet:
    """The replay shards of every replay policy, saved and loaded together, each under its
    own sub-directory of the checkpoint."""

    def __init__(self, replays: Mapping[str, Any]):
        self.replays = dict(replays)

    def settle(self) -> None:
        """Waits for every policy's calls to its shards still in flight."""
        for r in self.replays.values():
            r.settle()

    def save(self, directory: str) -> dict[str, dict[str, Any]]:
        """Every policy's shards under ``replay_<policy>/``; returns what ``meta.json`` records
        of them: each sub-directory's shards' sizes and capacities."""
        record = {}
        for pid, r in self.replays.items():
            os.makedirs(os.path.join(directory, f"replay_{pid}"), exist_ok=True)
            record[f"replay_{pid}"] = r.save(os.path.join(directory, f"replay_{pid}"))[RECORD_KEY]
        return {RECORD_KEY: record}

    def saved_at(self, directory: str) -> None:
        for pid, r in self.replays.items():
            r.saved_at(os.path.join(directory, f"replay_{pid}"))

    def load(self, directory: str) -> None:
        for pid, r in self.replays.items():
            r.load(os.path.join(directory, f"replay_{pid}"))

    def stop(self) -> None:
        for r in self.replays.values():
            r.stop()


class MultiAgentProgram:
    """A multi-agent run, built by :class:`~jaxflow.api.algorithm.Algorithm` through the
    ``program`` hook: one learner (and replay, for replay algorithms) per policy, one set of
    rollout workers for all of them, and the registered multi-agent plan over them."""

    def __init__(self, config: MultiAgentConfig, spec: Any, mode: str):
        probe = envs.make_multiagent(config.env, **config.env_config)
        agents = list(probe.possible_agents)
        self.config, self.spec = config, spec
        learners, worker_specs, replays, steps = {}, {}, {}, {}
        self.policy: dict[str, Policy] = {}
        pspecs = {pid: config.policy_spec(pid) for pid in config.policies}
        pconfigs = {pid: config.policy_config(pid) for pid in config.policies}
        for pid in config.policies:
            pspec, pconfig = pspecs[pid], pconfigs[pid]
            refuse_normalization(pconfig, "in multi-agent runs")
            own = [a for a in agents if config.mapping[a] == pid]
            spaces = [(probe.observation_space(a), probe.action_space(a)) for a in own]
            require(
                all(s == spaces[0] for s in spaces),
                f"MultiAgentConfig: the agents of policy {pid!r} ({own}) have different spaces.",
            )
            self.policy[pid], learners[pid] = build_learner(pconfig, pspec, check_spaces(pspec, config.env, *spaces[0]))
            ship_by_value(self.policy[pid].network)
            worker_specs[pid] = WorkerSpec(
                pconfig, self.policy[pid], pspec.postprocess, None, pspec.workers.encode, pspec.workers.explore
            )
            steps[pid] = (
                max(1, config.rollout.num_workers)
                * config.rollout.num_envs_per_worker
                * config.rollout.rollout_fragment_length
                * len(own)
            )
        probe.close()
        init_ray()
        for pid, pspec in pspecs.items():
            if pspec.run.replay is not None:
                replays[pid] = pspec.run.replay(pconfigs[pid])
        self.workers = WorkerSet(
            MultiAgentWorkerSpec(config, worker_specs, dict(config.mapping)),
            {pid: lr.get_weights() for pid, lr in learners.items()},
            {pid: lr.version for pid, lr in learners.items()},
            worker_cls=MultiAgentRolloutWorker,
        )
        self.policies = {
            pid: PolicySlot(
                pid,
                pspecs[pid],
                pconfigs[pid],
                learners[pid],
                PolicyWorkers(self.workers, pid),
                replays.get(pid),
                steps[pid],
            )
            for pid in config.policies
        }
        self.replay = ReplaySet(replays) if replays else None
        self.files = self.replay
        self._results = spec.plan(self.workers, self.policies, config)

    def results(self) -> Any:
        return self._results

    def get_state(self) -> dict[str, Any]:
        """Every policy's learner state, by policy id."""
        return {pid: p.learner.get_state() for pid, p in self.policies.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for pid, p in self.policies.items():
            p.learner.set_state(state[pid])
        self.workers.sync_weights(self.get_weights(), {pid: p.learner.version for pid, p in self.policies.items()})

    def get_weights(self, member: int = 0) -> dict[str, Any]:
        return {pid: p.learner.get_weights() for pid, p in self.policies.items()}

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Every policy acting greedily for its agents: see :func:`~jaxflow.rollout.evaluation.evaluate_policies`."""
        return evaluate_policies(self.config, self.policy, self.get_weights(), self.config.mapping, episodes, seed)

    def stop(self) -> None:
        """Stops the plan, every policy's learner thread, the workers and the replay shards."""
        stop_run(self._results, [p.learner for p in self.policies.values()], self.workers, self.replay)
