"""An algorithm run as an object: build from a name or a config, ``train()``, ``save``,
``restore``, ``evaluate``, ``stop`` -- the Python API the CLI is written on.

Algorithms register an :class:`~jaxflow.api.spec.AlgorithmSpec`; jaxflow finds them by name
(see :mod:`jaxflow.api.registry`) and never imports them, so the dependency points from
``jaxflow.algorithms`` to the engine. Whatever kind of run the config asks for, an
:class:`Algorithm` drives it through the :class:`~jaxflow.api.program.Program` protocol.
"""

from __future__ import annotations

import os
from typing import Any

import flax.linen as nn
import jax

from jaxflow.api import checkpoint
from jaxflow.api.evaluation import PeriodicEvaluation
from jaxflow.api.program import Program, build_program, resolve_mode
from jaxflow.api.ray_program import NormalizedState, build_learner
from jaxflow.api.registry import get_algorithm, spec_of
from jaxflow.api.spaces import env_spaces
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.config.names import make_config, replace_config
from jaxflow.config.parsing import from_json_dict, to_json_dict
from jaxflow.networks.models import describe_module
from jaxflow.ops.metrics import Context
from jaxflow.policies.policy import Policy
from jaxflow.rollout.normalize import Normalizer, normalizer_init


class Algorithm:
    """One training run.

    Example:
        >>> algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=2)  # doctest: +SKIP
        >>> result = algo.train()                                          # doctest: +SKIP
        >>> path = algo.save("runs/ppo"); algo.stop()                      # doctest: +SKIP
        >>> algo = Algorithm.restore("runs/ppo")                           # doctest: +SKIP
    """

    def __init__(self, config: Any, spec: AlgorithmSpec | None = None, program: Program | None = None):
        self.spec = spec or spec_of(config)
        self.config = config
        self.mode = resolve_mode(config, self.spec)
        self.program: Program = program or build_program(config, self.spec)
        self._results = self.program.results()
        if config.evaluation_interval:
            self._results = self._results.for_each(PeriodicEvaluation(self.program, config))
        self.last_result: dict[str, Any] | None = None

    @classmethod
    def build(cls, algorithm: str | Any, **fields: Any) -> Algorithm:
        """From an algorithm name (plus config fields, flat or dotted names) or from a config object."""
        if isinstance(fields.get("model"), nn.Module):  # an instance: stored as its class and fields
            fields["model"], fields["model_config"] = describe_module(fields["model"])
        if isinstance(algorithm, str):
            spec = get_algorithm(algorithm)
            return cls(make_config(spec.config_cls, **fields), spec)
        return cls(replace_config(algorithm, **fields) if fields else algorithm)

    # What some programs have (a Ray run's learner and workers, a replay run's shards), for
    # tests and notebooks that look inside; None where the program has no such part.
    @property
    def learner(self) -> Any:
        return getattr(self.program, "learner", None)

    @property
    def workers(self) -> Any:
        return getattr(self.program, "workers", None)

    @property
    def replay(self) -> Any:
        return getattr(self.program, "replay", None)

    @property
    def policy(self) -> Any:
        return getattr(self.program, "policy", None)

    @property
    def network(self) -> Any:
        """The policy's flax module."""
        return self.policy.network if isinstance(self.policy, Policy) else None

    @property
    def context(self) -> Context:
        ctx = self._results.context
        assert isinstance(ctx, Context), "a program's results report through ReportMetrics"
        return ctx

    @property
    def iteration(self) -> int:
        return int(self.context.counters["training_iteration"])

    def train(self) -> dict[str, Any]:
        """Runs one training iteration and returns its result dict."""
        self.last_result = next(self._results)
        return self.last_result

    def save(self, directory: str) -> str:
        """Writes a checkpoint under ``directory``; returns its path."""
        meta = {"algorithm": self.spec.name, "config": to_json_dict(self.config), "context": self.context.state()}
        files = self.program.files
        state = self.program.get_state()
        checkpoint.check_finite(state)
        path = checkpoint.save(directory, self.iteration, state, meta, None if files is None else files.save)
        if files is not None:
            files.saved_at(path)
        return path

    @classmethod
    def restore(cls, path: str, **overrides: Any) -> Algorithm:
        """Rebuilds the run saved at ``path`` (a checkpoint or a directory of them).

        ``overrides`` may change fields that do not change the learner's state,
        e.g. ``num_workers`` (flat or dotted names).
        """
        ckpt, meta = find_checkpoint(path)
        spec = get_algorithm(meta["algorithm"])
        config = from_json_dict(spec.config_cls, meta["config"])
        algo = cls(replace_config(config, **overrides) if overrides else config, spec)
        algo.load(ckpt)
        return algo

    def load(self, path: str) -> None:
        """Loads the program's state, the counters and any checkpointed files into this run."""
        ckpt, meta = find_checkpoint(path)
        self.program.set_state(checkpoint.restore_state(ckpt, self.program.get_state()))
        self.context.load_state(meta["context"])
        if self.program.files is not None:
            self.program.files.load(ckpt)

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Runs the greedy policy for ``episodes`` episodes in this process (with several
        agents in one run, the policy of agent ``member``)."""
        return self.program.evaluate(episodes, seed, member)

    def stop(self) -> None:
        """Stops the run's background threads and actors."""
        self.program.stop()


def find_checkpoint(path: str) -> tuple[str, dict[str, Any]]:
    """The latest complete checkpoint at or under ``path`` and its metadata."""
    ckpt = checkpoint.latest(path)
    if ckpt is None:
        raise checkpoint.CheckpointError(f"No complete checkpoint under {os.path.abspath(path)!r}.")
    return ckpt, checkpoint.load_meta(ckpt)


def load_policy(path: str) -> tuple[Any, Policy, Any, Normalizer | None]:
    """``(config, policy, params, normalizer)`` of a checkpoint of a standard program, without
    starting Ray; ``normalizer`` holds the run's observation statistics where it normalized them."""
    from jaxflow.ondevice.program import DeviceProgram

    ckpt, meta = find_checkpoint(path)
    spec = get_algorithm(meta["algorithm"])
    config = from_json_dict(spec.config_cls, meta["config"])
    if resolve_mode(config, spec) == "device":
        program = DeviceProgram(config, spec)
        program.set_state(checkpoint.restore_state(ckpt, program.get_state()))
        return config, program.policy, program.get_weights(), program.get_normalizer()
    policy, learner = build_learner(config, spec)
    stats = normalizer_init(config, tuple(env_spaces(config, spec)[0].shape or ()))
    if stats is None:
        state = checkpoint.restore_state(ckpt, learner.get_state())
        return config, policy, jax.device_get(state.params), None
    state, stats = checkpoint.restore_state(ckpt, NormalizedState(learner.get_state(), stats))
    return config, policy, jax.device_get(state.params), stats
