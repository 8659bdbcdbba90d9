"""Multi-agent runs: several policies, each with its own network, loss and learner, trained
on one set of rollout workers (Liang et al., 2021, "RLlib Flow", Section 5: composing
algorithms on shared workers).

Agents are assigned to policies by a mapping; agents mapped to the same policy share its
learner. A :class:`MultiAgentRolloutWorker` steps a vector of multi-agent environments
(PettingZoo's Parallel API) and returns one :class:`~jaxflow.workers.SampleBatch` per
policy, inside a :class:`MultiAgentBatch`; ``SelectExperiences`` routes each policy's
batches to the sub-flow of its algorithm.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import os
import time
from fractions import Fraction
from typing import Any, Literal, Mapping, NamedTuple, Sequence

import jax
import numpy as np

import envs
from jaxflow.algorithm import build_learner, check_spaces, get_algorithm, init_ray, multiagent_algorithms
from jaxflow.config import NON_NEGATIVE, POSITIVE, ConfigError, param, require, validate
from jaxflow.iterators import Operator
from jaxflow.metrics import Context, EpisodeWindow
from jaxflow.networks import forward_packed, greedy_action
from jaxflow.workers import (
    HostPostprocess,
    RolloutWorker,
    SampleBatch,
    SampleTiming,
    Stopwatch,
    WorkerSet,
    WorkerSpec,
    concat_batches,
    sample_categorical,
    split_packed,
    sum_timings,
)


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig:
    """A multi-agent run: the environment, the policies and which agent each one controls.

    Loaded from JSON with :func:`load_multiagent_config` (``jaxflow train --multiagent FILE``)::

        {"env": "multiagent/Coordination-v0",
         "policies": {"ppo": {"algorithm": "PPO", "config": {"lr": 0.001}},
                      "dqn": {"algorithm": "DQN"}},
         "mapping": {"agent_0": "ppo", "agent_1": "dqn"}}
    """

    policies: dict = param(None, factory=dict)
    """Policy id -> {"algorithm": name, "config": {field: value}}; the fields override the
    algorithm's defaults (worker-level fields below are shared and cannot be set per policy)."""
    mapping: dict = param(None, factory=dict)
    """Agent id -> policy id, for every agent of the environment."""
    env: str = "multiagent/Coordination-v0"
    """A multi-agent environment id (see `jaxflow list`)."""
    env_config: dict = param(None, factory=dict)
    """Keyword arguments for the environment's constructor."""
    num_workers: int = param(2, NON_NEGATIVE)
    """Ray rollout worker actors; 0 samples in the driver process."""
    num_envs_per_worker: int = param(8, POSITIVE)
    """Environments each worker steps in lockstep."""
    rollout_fragment_length: int = param(32, POSITIVE)
    """Time steps T per fragment."""
    seed: int = param(0, NON_NEGATIVE)
    """Seeds every policy's parameters and every environment copy."""
    on_worker_failure: Literal["raise", "ignore", "restart"] = "raise"
    """What a dead rollout worker does to the run."""
    worker_timeout_s: float = param(120.0, POSITIVE)
    """A worker silent for this long is treated as dead."""
    num_cpus_per_worker: float = param(1.0, NON_NEGATIVE)
    """CPUs Ray reserves for each rollout worker."""
    num_gpus_per_worker: float = param(0.0, NON_NEGATIVE)
    """GPUs (a fraction: workers share one) Ray reserves for each rollout worker; above 0 the
    policies act on that GPU."""
    metrics_num_episodes: int = param(100, POSITIVE)
    """Episode statistics average this many most recent episodes."""
    min_env_steps_per_iteration: int = param(4096, NON_NEGATIVE)
    """A training iteration lasts at least this many sampled env steps."""
    mode: Literal["ray"] = "ray"
    """Multi-agent runs use Ray rollout workers."""

    def __post_init__(self) -> None:
        validate(self)
        require(bool(self.policies), "MultiAgentConfig.policies must name at least one policy.")
        for pid, entry in self.policies.items():
            require(isinstance(entry, Mapping) and "algorithm" in entry and set(entry) <= {"algorithm", "config"},
                    f"MultiAgentConfig.policies[{pid!r}] must be {{\"algorithm\": NAME, \"config\": {{...}}}}, got {entry!r}.")
            self.policy_config(pid)  # validates the policy's fields now, before anything starts
        unknown = sorted(set(self.mapping.values()) - set(self.policies))
        require(not unknown, f"MultiAgentConfig.mapping names undefined policies {unknown}; defined: {sorted(self.policies)}.")
        probe = envs.make_multiagent(self.env, **self.env_config)
        agents = list(probe.possible_agents)
        probe.close()
        unmapped, strangers = [a for a in agents if a not in self.mapping], sorted(set(self.mapping) - set(agents))
        require(not unmapped, f"MultiAgentConfig.mapping has no policy for agents {unmapped} of {self.env!r}.")
        require(not strangers, f"MultiAgentConfig.mapping names {strangers}, which {self.env!r} does not have; "
                f"its agents: {agents}.")
        idle = sorted(set(self.policies) - set(self.mapping.values()))
        require(not idle, f"MultiAgentConfig.policies {idle} control no agent; map an agent to each or remove them.")

    def policy_spec(self, pid: str) -> Any:
        spec = get_algorithm(self.policies[pid]["algorithm"])
        require(spec.flow is not None, f"MultiAgentConfig.policies[{pid!r}]: {spec.name} cannot train a policy of a "
                f"multi-agent run (algorithms that can: {', '.join(multiagent_algorithms())}).")
        return spec

    def policy_config(self, pid: str) -> Any:
        """The policy's algorithm config: its own fields over the algorithm's defaults, and the
        run's worker-level fields."""
        spec = self.policy_spec(pid)
        own = dict(self.policies[pid].get("config", {}))
        shared = {f: getattr(self, f) for f in WORKER_FIELDS}
        clash = sorted(set(own) & set(shared))
        require(not clash, f"MultiAgentConfig.policies[{pid!r}].config sets {clash}, which the run's workers share; "
                "set them at the top level of the multi-agent config.")
        fields = {f.name for f in dataclasses.fields(spec.config_cls)}
        bad = sorted(set(own) - fields)
        if bad:
            close = difflib.get_close_matches(bad[0], sorted(fields), n=3)
            raise ConfigError(f"MultiAgentConfig.policies[{pid!r}].config: {spec.config_cls.__name__} has no field "
                              f"{bad[0]!r}.{f' Did you mean {close}?' if close else ''}")
        return spec.config_cls(**dict(own, **shared))


WORKER_FIELDS = ("env", "env_config", "num_workers", "num_envs_per_worker", "rollout_fragment_length", "seed",
                 "on_worker_failure", "worker_timeout_s", "num_cpus_per_worker", "num_gpus_per_worker", "metrics_num_episodes")
"""Fields every policy of a multi-agent run shares with its rollout workers."""


def load_multiagent_config(path: str) -> MultiAgentConfig:
    """Reads a multi-agent config from a JSON file (see :class:`MultiAgentConfig`)."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e}).") from e
    fields = {f.name for f in dataclasses.fields(MultiAgentConfig)}
    bad = sorted(set(data) - fields)
    require(not bad, f"{path}: unknown keys {bad}; a multi-agent config has {sorted(fields)}.")
    return MultiAgentConfig(**data)


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

    @staticmethod
    def concat(batches: Sequence["MultiAgentBatch"]) -> "MultiAgentBatch":
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
    :class:`~jaxflow.workers.WorkerSpec` and the agent -> policy mapping."""

    config: MultiAgentConfig
    policies: dict[str, WorkerSpec]
    mapping: dict[str, str]


class MultiAgentRolloutWorker:
    """Steps a vector of multi-agent environments; every policy acts for its agents.

    Each policy's fragment follows :meth:`~jaxflow.workers.RolloutWorker.sample`'s
    conventions (time-major, truncations bootstrapped through the reward with the policy's
    own value of the final observation), with one column per (agent, environment), so the
    policy's own ``postprocess`` and ``encode`` run on it unchanged.
    """

    def __init__(self, spec: MultiAgentWorkerSpec, index: int, incarnation: int = 0):
        cfg = spec.config
        self.index, self.incarnation, self.config = index, incarnation, cfg
        seed = cfg.seed + 10_000 * index + 1_000_000 * incarnation
        self.env = envs.MultiAgentVectorEnv(cfg.env, cfg.num_envs_per_worker, seed, cfg.env_config, index, incarnation)
        self.policies = spec.policies
        self.agents = {pid: [a for a in self.env.agents if spec.mapping[a] == pid] for pid in spec.policies}
        self._forward = {pid: jax.jit(functools.partial(forward_packed, ws.network.apply)) for pid, ws in spec.policies.items()}
        self._postprocess = {pid: HostPostprocess(functools.partial(ws.postprocess, config=ws.config))
                             for pid, ws in spec.policies.items() if ws.postprocess is not None}
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
    run_chain = RolloutWorker.run_chain

    def set_weights(self, weights: dict[str, Any], version: dict[str, int]) -> None:
        self.params.update({pid: jax.device_put(w) for pid, w in weights.items()})
        self.weights_version.update(version)

    def _columns(self, pid: str, per_agent: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([per_agent[a] for a in self.agents[pid]], axis=0)

    def _logits_values(self, pid: str, obs: np.ndarray, policy_watch: Stopwatch) -> tuple[np.ndarray, np.ndarray]:
        with policy_watch:
            return split_packed(self._forward[pid](self.params[pid], obs))

    def sample(self) -> MultiAgentBatch:
        missing = sorted(set(self.policies) - set(self.params))
        if missing:
            raise RuntimeError(f"rollout worker {self.index}: sample() before the weights of {missing}")
        start, env_watch, policy_watch = time.perf_counter(), Stopwatch(), Stopwatch()
        T, B = self.config.rollout_fragment_length, self.env.num_envs
        steps: dict[str, list[dict[str, np.ndarray]]] = {pid: [] for pid in self.policies}
        for t in range(T):
            actions: dict[str, np.ndarray] = {}
            for pid, ws in self.policies.items():
                obs = self._columns(pid, self._obs)
                logits, values = self._logits_values(pid, obs, policy_watch)
                if ws.explore is None:
                    a, logp = sample_categorical(self._rng, logits)
                else:
                    a, logp = ws.explore(self._rng, logits, ws.config, self.index, (self.env_steps + t * B) * len(self.agents[pid]))
                steps[pid].append(dict(obs=obs, actions=a, logp=logp, logits=logits, values=values))
                actions.update(zip(self.agents[pid], np.split(a, len(self.agents[pid]))))
            with env_watch:
                step = self.env.step(actions)
            for pid, ws in self.policies.items():
                r, term, trunc = (self._columns(pid, x) for x in (step.reward, step.terminated, step.truncated))
                bootstrap = trunc & ~term
                if bootstrap.any():
                    r = r + ws.config.gamma * bootstrap * self._logits_values(pid, self._columns(pid, step.final_obs), policy_watch)[1]
                steps[pid][-1].update(rewards=r.astype(np.float32), discounts=(ws.config.gamma * ~(term | trunc)).astype(np.float32))
            self._obs = step.obs
        self.env_steps += T * B
        episodes = self.env.pop_episodes()
        batches = {pid: self._policy_batch(pid, steps[pid], episodes, policy_watch) for pid in self.policies}
        # All agents of an episode end together, so their arrays line up episode by episode.
        returns = np.sum([episodes[a][0] for a in self.env.agents], axis=0, dtype=np.float64)
        timing = SampleTiming(time.perf_counter() - start, env_watch.seconds, policy_watch.seconds)
        return MultiAgentBatch(batches, T * B, returns, episodes[self.env.agents[0]][1], timing)

    def close(self) -> None:
        """Stops the environments (the worker set's ``stop()`` for a worker in the driver)."""
        self.env.close()

    def _policy_batch(self, pid: str, steps: list[dict[str, np.ndarray]], episodes: Mapping[str, tuple[np.ndarray, np.ndarray]],
                      policy_watch: Stopwatch) -> SampleBatch:
        ws = self.policies[pid]
        last_obs = self._columns(pid, self._obs)
        traj = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
        traj.update(bootstrap_value=self._logits_values(pid, last_obs, policy_watch)[1], last_obs=last_obs)
        if pid in self._postprocess:
            traj = self._postprocess[pid](traj)
        if ws.encode is not None:
            traj = ws.encode(traj, ws.config)
        agents = self.agents[pid]
        returns = np.concatenate([episodes[a][0] for a in agents])
        lengths = np.concatenate([episodes[a][1] for a in agents])
        return SampleBatch(traj, len(steps) * len(last_obs), returns, lengths, self.weights_version[pid])


class PolicyWorkers:
    """One policy's view of the run's workers: weight syncs send that policy's weights only.
    Single-agent operators (``BroadcastWeights``, ``UpdateWorkerWeights``) take it in place
    of a :class:`~jaxflow.workers.WorkerSet`."""

    def __init__(self, workers: WorkerSet, policy_id: str):
        self.workers, self.policy_id = workers, policy_id

    def sync_weights(self, weights: Any, version: int) -> None:
        self.workers.sync_weights({self.policy_id: weights}, {self.policy_id: version})

    def set_weights_of(self, index: int, weights: Any, version: int) -> None:
        self.workers.set_weights_of(index, {self.policy_id: weights}, {self.policy_id: version})


class SelectExperiences(Operator):
    """A multi-agent batch -> the :class:`~jaxflow.workers.SampleBatch` of the given policies
    (joined, if several), and their episode statistics under ``policies`` in the results.

    Example:
        >>> ppo_batches = rollouts.for_each(SelectExperiences(["ppo"]))  # doctest: +SKIP
    """

    def __init__(self, policy_ids: Sequence[str], num_episodes: int = 100):
        self.policy_ids = list(policy_ids)
        self._episodes = {pid: EpisodeWindow(num_episodes) for pid in self.policy_ids}

    def __call__(self, batch: MultiAgentBatch, ctx: Context) -> SampleBatch:
        stats = ctx.info.setdefault("policies", {})
        for pid in self.policy_ids:
            b = batch.policy_batches[pid]
            self._episodes[pid].record(b.episode_returns, b.episode_lengths)
            entry = stats.setdefault(pid, {})
            entry.update(self._episodes[pid].summary())
            entry["agent_steps_sampled"] = entry.get("agent_steps_sampled", 0) + b.env_steps
        return concat_batches([batch.policy_batches[pid] for pid in self.policy_ids])


class CountPolicyUpdates(Operator):
    """Counts the updates of one policy (each output of its training sub-flow) and keeps its
    learner's optimizer steps and latest statistics under ``policies`` in the results."""

    def __init__(self, policy_id: str, learner: Any):
        self.policy_id, self.learner = policy_id, learner

    def __call__(self, item: Any, ctx: Context) -> Any:
        entry = ctx.info.setdefault("policies", {}).setdefault(self.policy_id, {})
        entry["num_updates"] = entry.get("num_updates", 0) + 1
        entry["sgd_steps"] = self.learner.version
        metrics = item[1] if isinstance(item, tuple) else item
        if isinstance(metrics, Mapping):
            entry["learner"] = {k: v for k, v in metrics.items() if isinstance(v, float)}
        return item


class Policy(NamedTuple):
    """One policy of a run, as a multi-agent plan sees it."""

    id: str
    spec: Any
    config: Any
    learner: Any
    workers: PolicyWorkers
    replay: Any
    steps_per_round: int
    """Agent steps of this policy in one bulk-synchronous round of every worker."""


def on_policy_flow(train_flow: Any) -> Any:
    """The multi-agent ``flow`` of an algorithm whose sub-flow ``train_flow(rollouts, learner,
    workers, config)`` makes one update per train batch (A2C, PPO): an update every k rounds,
    k the rounds of sampling a train batch of this policy's agent steps takes."""

    def flow(experiences: Any, policy: Policy) -> list[tuple[Any, Fraction]]:
        rounds = -(-policy.config.train_batch_size // policy.steps_per_round)
        train = train_flow(experiences, policy.learner, policy.workers, policy.config)
        return [(train.for_each(CountPolicyUpdates(policy.id, policy.learner)), Fraction(1, rounds))]

    return flow


def round_robin_weights(rates: Sequence[Fraction]) -> list[int]:
    """Round-robin weights for sub-flows that yield ``rates[i]`` outputs per round of
    sampling (PPO: 1/k when its train batch takes k rounds; DQN: one store per round and one
    replayed batch per fragment stored), so every flow keeps pace with the rollout stream."""
    scale = math.lcm(*(r.denominator for r in rates))
    return [int(r * scale) for r in rates]


class ReplaySet:
    """The replay shards of every replay policy, saved and loaded together, each under its
    own sub-directory of the checkpoint."""

    def __init__(self, replays: Mapping[str, Any]):
        self.replays = dict(replays)

    def save(self, directory: str) -> None:
        for pid, r in self.replays.items():
            os.makedirs(os.path.join(directory, f"replay_{pid}"), exist_ok=True)
            r.save(os.path.join(directory, f"replay_{pid}"))

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
    """A multi-agent run, built by :class:`~jaxflow.algorithm.Algorithm` through the
    ``program`` hook: one learner (and replay, for replay algorithms) per policy, one set of
    rollout workers for all of them, and the registered multi-agent plan over them."""

    def __init__(self, config: MultiAgentConfig, spec: Any, mode: str):
        probe = envs.make_multiagent(config.env, **config.env_config)
        agents = list(probe.possible_agents)
        self.config, self.spec = config, spec
        learners, worker_specs, replays, steps = {}, {}, {}, {}
        self.network: dict[str, Any] = {}
        pspecs = {pid: config.policy_spec(pid) for pid in config.policies}
        pconfigs = {pid: config.policy_config(pid) for pid in config.policies}
        for pid in config.policies:
            pspec, pconfig = pspecs[pid], pconfigs[pid]
            own = [a for a in agents if config.mapping[a] == pid]
            spaces = [(probe.observation_space(a), probe.action_space(a)) for a in own]
            require(all(s == spaces[0] for s in spaces),
                    f"MultiAgentConfig: the agents of policy {pid!r} ({own}) have different spaces.")
            self.network[pid], learners[pid] = build_learner(pconfig, pspec, check_spaces(config.env, *spaces[0]))
            worker_specs[pid] = WorkerSpec(pconfig, self.network[pid], pspec.postprocess, None, pspec.encode, pspec.explore)
            steps[pid] = max(1, config.num_workers) * config.num_envs_per_worker * config.rollout_fragment_length * len(own)
        probe.close()
        init_ray()
        for pid, pspec in pspecs.items():
            if pspec.replay is not None:
                replays[pid] = pspec.replay(pconfigs[pid])
        self.workers = WorkerSet(
            MultiAgentWorkerSpec(config, worker_specs, dict(config.mapping)),
            {pid: lr.get_weights() for pid, lr in learners.items()}, {pid: lr.version for pid, lr in learners.items()},
            worker_cls=MultiAgentRolloutWorker,
        )
        self.policies = {
            pid: Policy(pid, pspecs[pid], pconfigs[pid], learners[pid],
                        PolicyWorkers(self.workers, pid), replays.get(pid), steps[pid])
            for pid in config.policies
        }
        self.replay = ReplaySet(replays) if replays else None
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
        """Every policy acting greedily for its agents in ``episodes`` episodes: the mean and
        standard deviation of the episode return (summed over agents), and each policy's mean
        return per agent."""
        seed = self.config.seed + 7_777_777 if seed is None else seed
        env = envs.MultiAgentVectorEnv(self.config.env, 1, seed, self.config.env_config)
        act = {pid: jax.jit(functools.partial(greedy_action, net.apply)) for pid, net in self.network.items()}
        weights = self.get_weights()
        obs = env.reset()
        returns: list[np.ndarray] = []
        while len(returns) < episodes:
            actions = {a: np.asarray(act[pid](weights[pid], obs[a])) for a, pid in self.config.mapping.items()}
            obs = env.step(actions).obs
            ended = env.pop_episodes()
            if len(ended[env.agents[0]][0]):
                returns.append(np.stack([ended[a][0] for a in env.agents]))  # [agents, episodes ended]
        env.close()
        per_agent = np.concatenate(returns, axis=1)[:, :episodes]
        team = per_agent.sum(axis=0)
        by_policy = {pid: float(np.mean([per_agent[i] for i, a in enumerate(env.agents) if self.config.mapping[a] == pid]))
                     for pid in self.policies}
        return {"episodes": episodes, "return_mean": float(team.mean()), "return_std": float(team.std()),
                "returns": team.tolist(), "policies": by_policy}

    def stop(self) -> None:
        for p in self.policies.values():
            p.learner.stop()
        self.workers.stop()
        if self.replay is not None:
            self.replay.stop()
