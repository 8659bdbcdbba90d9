"""A multi-agent run's config: the environment, the policies and which agent each controls."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from jaxflow import envs
from jaxflow.api.registry import get_algorithm, multiagent_algorithms
from jaxflow.config import (
    COUNT,
    MAX_SEED,
    SIZE,
    Check,
    ConfigError,
    RolloutConfig,
    StrictKeywords,
    json_values,
    load_config_file,
    make_config,
    param,
    require,
    resolve,
    validate,
)


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig(StrictKeywords):
    """A multi-agent run: the environment, the policies and which agent each one controls.

    Loaded from JSON with :func:`load_multiagent_config` (``jaxflow train --multiagent FILE``)::

        {"env": "multiagent/Coordination-v0",
         "policies": {"ppo": {"algorithm": "PPO", "config": {"lr": 0.001}},
                      "dqn": {"algorithm": "DQN"}},
         "mapping": {"agent_0": "ppo", "agent_1": "dqn"}}

    The rollout settings may be given flat (``"num_workers": 2``), dotted or as a nested
    ``"rollout"`` object.
    """

    policies: dict = param(None, factory=dict)
    """Policy id -> {"algorithm": name, "config": {field: value}}; the fields (flat or dotted
    names) override the algorithm's defaults (the worker-level fields below are shared and
    cannot be set per policy)."""
    mapping: dict = param(None, factory=dict)
    """Agent id -> policy id, for every agent of the environment."""
    env: str = "multiagent/Coordination-v0"
    """A multi-agent environment id (see `jaxflow list`)."""
    env_config: dict = param(None, factory=dict)
    """Keyword arguments for the environment's constructor."""
    seed: int = param(0, Check(low=0, high=MAX_SEED, high_name="MAX_SEED"))
    """Seeds every policy's parameters and every environment copy."""
    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(rollout_fragment_length=32))
    """The rollout workers every policy shares (see :class:`~jaxflow.config.RolloutConfig`):
    32-step fragments by default; python vector envs only, and no sampling ahead."""
    metrics_num_episodes: int = param(100, SIZE)
    """Episode statistics average this many most recent episodes."""
    min_env_steps_per_iteration: int = param(4096, COUNT)
    """A training iteration lasts at least this many sampled env steps."""
    mode: Literal["ray"] = "ray"
    """Multi-agent runs use Ray rollout workers."""

    def __post_init__(self) -> None:
        validate(self)
        require(
            not self.rollout.sample_async,
            "MultiAgentConfig.sample_async=True: multi-agent workers sample when the plan asks, not ahead.",
        )
        require(bool(self.policies), "MultiAgentConfig.policies must name at least one policy.")
        for pid, entry in self.policies.items():
            require(
                isinstance(entry, Mapping)
                and "algorithm" in entry
                and set(entry) <= {"algorithm", "config"}
                and isinstance(entry.get("config", {}), Mapping),
                f'MultiAgentConfig.policies[{pid!r}] must be {{"algorithm": NAME, "config": {{...}}}}, got {entry!r}.',
            )
            self.policy_config(pid)  # validates the policy's fields now, before anything starts
        unknown = sorted(set(self.mapping.values()) - set(self.policies))
        require(
            not unknown,
            f"MultiAgentConfig.mapping names undefined policies {unknown}; defined: {sorted(self.policies)}.",
        )
        probe = envs.make_multiagent(self.env, **self.env_config)
        agents = list(probe.possible_agents)
        probe.close()
        unmapped, strangers = [a for a in agents if a not in self.mapping], sorted(set(self.mapping) - set(agents))
        require(not unmapped, f"MultiAgentConfig.mapping has no policy for agents {unmapped} of {self.env!r}.")
        require(
            not strangers,
            f"MultiAgentConfig.mapping names {strangers}, which {self.env!r} does not have; its agents: {agents}.",
        )
        idle = sorted(set(self.policies) - set(self.mapping.values()))
        require(not idle, f"MultiAgentConfig.policies {idle} control no agent; map an agent to each or remove them.")

    def policy_spec(self, pid: str) -> Any:
        spec = get_algorithm(self.policies[pid]["algorithm"])
        require(
            spec.run.flow is not None,
            f"MultiAgentConfig.policies[{pid!r}]: {spec.name} cannot train a policy of a "
            f"multi-agent run (algorithms that can: {', '.join(multiagent_algorithms())}).",
        )
        return spec

    def policy_config(self, pid: str) -> Any:
        """The policy's algorithm config: its own fields over the algorithm's defaults, and the
        run's worker-level fields."""
        spec = self.policy_spec(pid)
        shared = {f: getattr(self, f) for f in WORKER_FIELDS}
        try:
            own = json_values(spec.config_cls, self.policies[pid].get("config", {}))  # from a file, a checkpoint
            paths = {name: resolve(spec.config_cls, name) for name in sorted(own)}
        except ConfigError as e:
            raise ConfigError(f"MultiAgentConfig.policies[{pid!r}].config: {e}") from e
        clash = [name for name, path in paths.items() if path[0] in shared]
        require(
            not clash,
            f"MultiAgentConfig.policies[{pid!r}].config sets {clash}, which the run's workers share; "
            "set them at the top level of the multi-agent config.",
        )
        config = make_config(spec.config_cls, **own, **shared)
        require(
            not config.use_lstm,
            f"MultiAgentConfig.policies[{pid!r}]: use_lstm=True is not supported in multi-agent runs yet "
            "(their workers step feed-forward policies).",
        )
        require(  # a policy's run calls no callbacks: refused, not silently dropped
            not config.callbacks,
            f"MultiAgentConfig.policies[{pid!r}]: callbacks are not supported in multi-agent runs yet.",
        )
        return config


WORKER_FIELDS = ("env", "env_config", "seed", "rollout", "metrics_num_episodes")
"""Fields every policy of a multi-agent run shares with its rollout workers (``rollout``: all of its settings)."""


def load_multiagent_config(path: str) -> MultiAgentConfig:
    """Reads a multi-agent config from a JSON file (see :class:`MultiAgentConfig`)."""
    return load_config_file(MultiAgentConfig, path)
