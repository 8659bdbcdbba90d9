"""Multi-agent runs: several policies, each with its own network, loss and learner, trained
on one set of rollout workers (Liang et al., 2021, "RLlib Flow", Section 5: composing
algorithms on shared workers).

A :class:`MultiAgentRolloutWorker` steps a vector of multi-agent environments (PettingZoo's
Parallel API) and returns one :class:`~jaxflow.rollout.batch.SampleBatch` per policy, inside a
:class:`MultiAgentBatch`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxflow import envs
from jaxflow.config.constants import worker_seed
from jaxflow.policies.policy import compiled_forward, unpack
from jaxflow.rollout.batch import SampleBatch, SampleTiming, concat_batches, sum_timings
from jaxflow.rollout.postprocess import HostPostprocess
from jaxflow.rollout.stepping import Stopwatch
from jaxflow.rollout.truncation import bootstrap_truncations
from jaxflow.rollout.worker import RolloutWorker, WorkerSpec


class MultiAgentBatch(NamedTuple):
    """One fragment of every environment: a :class:`SampleBatch` per policy (its agents'
    steps as columns ``[T, agents x B]``), plus the run's env steps and episodes (an
    episode's return is the sum over its agents)."""

    policy_batches: dict[str, SampleBatch]
    env_steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    timing: SampleTiming | None = None
    """The worker's time for the whole fragment, all policies together."""

    @property
    def num_samples(self) -> int:
        return sum(b.num_samples for b in self.policy_batches.values())

    @property
    def weights_version(self) -> int:
        return min((b.weights_version for b in self.policy_batches.values()), default=-1)

    @property
    def replay_source(self) -> None:
        return None

    @property
    def episode_metrics(self) -> None:
        """None: a multi-agent run takes no callbacks, so no ``on_episode_end`` metrics come with it."""
        return None

    def train_arrays(self) -> dict[str, Any]:
        raise TypeError("a MultiAgentBatch trains policy by policy: select one policy's batch first (SelectPolicy)")

    def replay_rows(self) -> Any:
        raise TypeError("a MultiAgentBatch is stored policy by policy: select one policy's batch first (SelectPolicy)")

    @staticmethod
    def concat(batches: Sequence[MultiAgentBatch]) -> MultiAgentBatch:
        return MultiAgentBatch(
            {pid: concat_batches([b.policy_batches[pid] for b in batches]) for pid in batches[0].policy_batches},
            sum(b.env_steps for b in batches),
            np.concatenate([b.episode_returns for b in batches]),
            np.concatenate([b.episode_lengths for b in batches]),
            sum_timings([b.timing for b in batches]),
        )


@dataclasses.dataclass(frozen=True)
class MultiAgentWorkerSpec:
    """What a multi-agent rollout worker needs: the run's config, each policy's
    :class:`~jaxflow.rollout.worker.WorkerSpec` and the agent -> policy mapping."""

    config: Any
    policies: dict[str, WorkerSpec]
    mapping: dict[str, str]


class MultiAgentRolloutWorker:
    """Steps a vector of multi-agent environments; every policy acts for its agents.

    Each policy's fragment follows :meth:`~jaxflow.rollout.worker.RolloutWorker.sample`'s
    conventions (time-major, truncations bootstrapped through the reward with the policy's
    own value of the final observation), with one column per (agent, environment), so the
    policy's own ``postprocess`` and ``encode`` run on it unchanged.
    """

    def __init__(self, spec: MultiAgentWorkerSpec, index: int, incarnation: int = 0, env_entry: Any = None):
        if env_entry is not None:  # an id registered in the driver only
            envs.adopt(env_entry)
        cfg = spec.config
        self.index, self.incarnation, self.config = index, incarnation, cfg
        seed = worker_seed(cfg.seed, index, incarnation)
        self.env = envs.MultiAgentVectorEnv(
            cfg.env, cfg.rollout.num_envs_per_worker, seed, cfg.env_config, index, incarnation
        )
        self.policies = spec.policies
        self.agents = {pid: [a for a in self.env.agents if spec.mapping[a] == pid] for pid in spec.policies}
        self._forward = {pid: compiled_forward(ws.policy, seed) for pid, ws in spec.policies.items()}
        self._postprocess = {
            pid: HostPostprocess(functools.partial(ws.postprocess, config=ws.config))
            for pid, ws in spec.policies.items()
            if ws.postprocess is not None
        }
        self._rng = np.random.default_rng(seed)
        self._obs = self.env.reset()
        self.env_steps = 0
        self.params: dict[str, Any] = {}
        self.weights_version: dict[str, int] = {}

    @staticmethod
    def merge_weights(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
        """Weights arrive per policy; a worker keeps the latest of each."""
        return dict(old or {}, **new)

    # The same actor protocol as a single-agent worker (ping, par_for_each's chains).
    ping = RolloutWorker.ping
    node_id = RolloutWorker.node_id
    run_chain = RolloutWorker.run_chain

    def set_weights(self, weights: dict[str, Any], version: dict[str, int]) -> None:
        self.params.update({pid: jax.device_put(w) for pid, w in weights.items()})
        self.weights_version.update(version)

    def _columns(self, pid: str, per_agent: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([per_agent[a] for a in self.agents[pid]], axis=0)

    def _inputs_values(self, pid: str, obs: np.ndarray, policy_watch: Stopwatch) -> tuple[np.ndarray, np.ndarray]:
        with policy_watch:
            return unpack(self._forward[pid](self.params[pid], obs))

    def sample(self) -> MultiAgentBatch:
        missing = sorted(set(self.policies) - set(self.params))
        if missing:
            raise RuntimeError(f"rollout worker {self.index}: sample() before the weights of {missing}")
        start, env_watch, policy_watch = time.perf_counter(), Stopwatch(), Stopwatch()
        T, B = self.config.rollout.rollout_fragment_length, self.env.num_envs
        steps: dict[str, list[dict[str, np.ndarray]]] = {pid: [] for pid in self.policies}
        for t in range(T):
            actions: dict[str, np.ndarray] = {}
            for pid, ws in self.policies.items():
                obs = self._columns(pid, self._obs)
                inputs, values = self._inputs_values(pid, obs, policy_watch)
                if ws.explore is None:
                    a, logp = ws.policy.distribution.sample_host(self._rng, inputs)
                else:
                    a, logp = ws.explore(
                        self._rng, inputs, ws.config, self.index, (self.env_steps + t * B) * len(self.agents[pid])
                    )
                steps[pid].append(dict(obs=obs, actions=a, logp=logp, dist_inputs=inputs, values=values))
                actions.update(zip(self.agents[pid], np.split(ws.policy.distribution.to_env(a), len(self.agents[pid]))))
            with env_watch:
                step = self.env.step(actions)
            for pid, ws in self.policies.items():
                r, term, trunc = (self._columns(pid, x) for x in (step.reward, step.terminated, step.truncated))

                def final_value(pid: str = pid, final: Mapping[str, np.ndarray] = step.final_obs) -> np.ndarray:
                    return self._inputs_values(pid, self._columns(pid, final), policy_watch)[1]

                r, d = bootstrap_truncations(r, term, trunc, ws.config.gamma, final_value)
                steps[pid][-1].update(rewards=r.astype(np.float32), discounts=d.astype(np.float32))
            self._obs = step.obs
        self.env_steps += T * B
        episodes = self.env.pop_episodes()
        batches = {pid: self._policy_batch(pid, steps[pid], episodes, policy_watch) for pid in self.policies}
        # All agents of an episode end together, so their arrays line up episode by episode.
        returns = np.asarray(np.sum([episodes[a][0] for a in self.env.agents], axis=0, dtype=np.float64))
        timing = SampleTiming(time.perf_counter() - start, env_watch.seconds, policy_watch.seconds)
        return MultiAgentBatch(batches, T * B, returns, episodes[self.env.agents[0]][1], timing)

    def close(self) -> None:
        """Stops the environments (the worker set's ``stop()`` for a worker in the driver)."""
        self.env.close()

    def _policy_batch(
        self,
        pid: str,
        steps: list[dict[str, np.ndarray]],
        episodes: Mapping[str, tuple[np.ndarray, np.ndarray]],
        policy_watch: Stopwatch,
    ) -> SampleBatch:
        ws = self.policies[pid]
        last_obs = self._columns(pid, self._obs)
        traj = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
        traj.update(bootstrap_value=self._inputs_values(pid, last_obs, policy_watch)[1], last_obs=last_obs)
        if pid in self._postprocess:
            traj = self._postprocess[pid](traj)
        if ws.encode is not None:
            traj = ws.encode(traj, ws.config)
        agents = self.agents[pid]
        returns = np.concatenate([episodes[a][0] for a in agents])
        lengths = np.concatenate([episodes[a][1] for a in agents])
        return SampleBatch(traj, len(steps) * len(last_obs), returns, lengths, self.weights_version[pid])
