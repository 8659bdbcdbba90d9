"""An algorithm run as an object: build from a name or a config, ``train()``, ``save``,
``restore``, ``evaluate``, ``stop`` -- the Python API the CLI is written on.

Algorithms register an :class:`~jaxflow.api.spec.AlgorithmSpec`; jaxflow finds them by name
(see :mod:`jaxflow.api.registry`) and never imports them, so the dependency points from
``jaxflow.algorithms`` to the engine. Whatever kind of run the config asks for, an
:class:`Algorithm` drives it through the :class:`~jaxflow.api.program.Program` protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from jaxflow import envs
from jaxflow.api import checkpoint, checkpoint_state
from jaxflow.api.callbacks import RunCallbacks, callback_objects, run_callbacks
from jaxflow.api.evaluation import PeriodicEvaluation
from jaxflow.api.program import Program, build_program, resolve_mode
from jaxflow.api.ray_program import NormalizedState, RayProgram
from jaxflow.api.registry import get_algorithm, spec_of
from jaxflow.api.restore import RestorePlan, plan_restore
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.api.user_modules import IMPORTS_KEY, imported_modules
from jaxflow.config.names import make_config, replace_config
from jaxflow.config.parsing import to_json_dict
from jaxflow.networks.models import describe_module
from jaxflow.ondevice.program import DeviceProgram
from jaxflow.ops.metrics import Context
from jaxflow.policies.policy import Policy
from jaxflow.rollout.episode_hooks import episode_hooks
from jaxflow.rollout.evaluation import greedy_env_actions
from jaxflow.rollout.normalize import Normalizer

BEST = "best"
"""The member :func:`pick_member` reads as the one a checkpoint marks best."""


class Algorithm:
    """One training run.

    Example:
        >>> algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=2)  # doctest: +SKIP
        >>> result = algo.train()                                          # doctest: +SKIP
        >>> path = algo.save("runs/ppo"); algo.stop()                      # doctest: +SKIP
        >>> algo = Algorithm.restore("runs/ppo")                           # doctest: +SKIP
    """

    def __init__(
        self,
        config: Any,
        spec: AlgorithmSpec | None = None,
        program: Program | None = None,
        callbacks: Sequence[Any] | None = None,
    ):
        self.spec = spec or spec_of(config)
        self.config = config
        self.mode = resolve_mode(config, self.spec)
        # The callback objects of config.callbacks, made here unless the caller made them.
        self.callbacks = RunCallbacks(run_callbacks(config, self.spec, callbacks))
        self.program: Program = program or build_program(config, self.spec, self.callbacks.objects)
        self._results = self.program.results()
        self._evaluation: PeriodicEvaluation | None = None  # evaluation during training
        if getattr(config, "evaluation_interval", 0):  # multi-agent configs have no such field
            self._evaluation = PeriodicEvaluation(self.program, config)
            self._results = self._results.for_each(self._evaluation)
        self.last_result: dict[str, Any] | None = None
        self._greedy: Any = None  # policy.greedy compiled on the first compute_actions

    @classmethod
    def build(cls, algorithm: str | Any, **fields: Any) -> Algorithm:
        """From an algorithm name (plus config fields, flat or dotted names) or from a config object.

        ``env`` may be an id or a factory, ``factory(**env_config) -> gymnasium.Env`` (an Env
        class or a function), registered as ``user/<its name>`` (:func:`jaxflow.envs.register_factory`).
        ``callbacks`` may be an object, a class or a list of them (:mod:`~jaxflow.api.callbacks`):
        these objects are called, and the config keeps their ``"module:Class"`` names.
        """
        if callable(fields.get("env")):  # an env made in the notebook: registered as user/<its name>
            fields["env"] = envs.register_factory(fields["env"])
        if isinstance(fields.get("model"), nn.Module):  # an instance: stored as its class and fields
            fields["model"], fields["model_config"] = describe_module(fields["model"])
        objects = None
        if "callbacks" in fields:  # objects or classes: the config keeps their names
            fields["callbacks"], objects = callback_objects(fields["callbacks"])
        if isinstance(algorithm, str):
            spec = get_algorithm(algorithm)
            return cls(make_config(spec.config_cls, **fields), spec, callbacks=objects)
        return cls(replace_config(algorithm, **fields) if fields else algorithm, callbacks=objects)

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
        """Runs one training iteration and returns its result dict, after the callbacks'
        ``on_train_result`` (which may add ``custom_metrics`` and ask the run to stop: ``stopped_by``)."""
        self.last_result = self.callbacks.train_result(self, next(self._results))
        return self.last_result

    def finish_evaluations(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result``, the run's last, with the evaluations during training that are still
        playing (Ray mode's evaluator plays behind training) waited for and added to it, so
        that every due evaluation is reported; :func:`~jaxflow.api.loop.train` calls it before
        it logs its last result."""
        return result if self._evaluation is None else self._evaluation.finish(result)

    def save(self, directory: str) -> str:
        """Writes a checkpoint under ``directory``; returns its path, which the callbacks'
        ``on_checkpoint`` are given."""
        files = self.program.files
        if files is not None:  # replies still owed count into the counters read next
            files.settle()
        meta = {"algorithm": self.spec.name, "config": to_json_dict(self.config), "context": self.context.state()}
        meta[IMPORTS_KEY] = imported_modules()  # the user's modules, imported again where it is restored
        recorded = getattr(self.program, "checkpoint_meta", None)  # a device-mode PBT run's best member
        meta.update(recorded() if recorded is not None else {})
        state = self.program.get_state()
        checkpoint_state.check_finite(state)
        path = checkpoint.save(directory, self.iteration, state, meta, None if files is None else files.save)
        if files is not None:
            files.saved_at(path)
        self.callbacks.checkpoint(self, path)
        return path

    @classmethod
    def restore(cls, path: str, callbacks: Any = None, **overrides: Any) -> Algorithm:
        """Rebuilds the run saved at ``path``: that checkpoint, or the newest one under a
        directory of them that verifies (see :func:`~jaxflow.api.restore.plan_restore`), after
        importing the user's modules the run imported (``--import``; :mod:`~jaxflow.api.user_modules`).

        ``overrides`` may change fields that do not change the learner's state,
        e.g. ``num_workers`` (flat or dotted names); others are refused before anything starts.
        ``callbacks`` (as :meth:`build` takes them) replace the callbacks the run remembers,
        which are otherwise made again from their names.
        """
        plan = plan_restore(path, overrides)
        if callbacks is None:
            return cls.from_plan(plan)
        names, objects = callback_objects(callbacks)
        return cls.from_plan(plan._replace(config=replace_config(plan.config, callbacks=names)), objects)

    @classmethod
    def from_plan(cls, plan: RestorePlan, callbacks: Sequence[Any] | None = None) -> Algorithm:
        """Starts the run a :func:`~jaxflow.api.restore.plan_restore` verified and loads it;
        ``callbacks``: the objects of its config's ``callbacks`` (else made from their names)."""
        objects = run_callbacks(plan.config, plan.spec, callbacks, restoring=True)
        program = plan.template.program if plan.template is not None else None
        if isinstance(program, DeviceProgram):  # the template, built before the callbacks were known
            program.episode_hooks = episode_hooks(objects)
        algo = cls(plan.config, plan.spec, program, objects)
        algo._load_verified(plan.path, plan.meta)
        return algo

    def load(self, path: str) -> None:
        """Loads the program's state, the counters and any checkpointed files into this run,
        from checkpoint ``path`` or the newest one under it that verifies and fits."""
        found = checkpoint.search(path, lambda ckpt, _: checkpoint_state.check_shapes(ckpt, self.program.get_state()))
        self._load_verified(found.path, found.meta)

    def _load_verified(self, ckpt: str, meta: dict[str, Any]) -> None:
        template = self.program.get_state()
        checkpoint_state.check_shapes(ckpt, template)  # a program of its own is checked only here, once started
        self.program.set_state(checkpoint_state.restore_state(ckpt, template))
        self.context.load_state(meta["context"])
        if self.program.files is not None:
            self.program.files.load(ckpt)

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """Runs the greedy policy for ``episodes`` episodes in this process (with several
        agents in one run, the policy of agent ``member``)."""
        return self.program.evaluate(episodes, seed, member)

    def compute_actions(self, observations: Any, member: int = 0, state: Any = None) -> Any:
        """The greedy policy's actions for a batch of observations ``[B, *obs]``, as the env
        takes them (what :meth:`evaluate` plays), from the run's current weights (with several
        agents in one device-mode run, those of agent ``member``).

        A recurrent policy (``use_lstm``) returns ``(actions, state)``: pass that state back
        with the next observations of the same ``B`` episodes; ``state=None`` starts ``B`` new
        episodes (the network's ``initial_carry``, zeros for jaxflow's LSTM). A feed-forward policy returns the actions alone and takes no state.

        >>> algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=0)  # doctest: +SKIP
        >>> algo.compute_actions(np.zeros((2, 4), np.float32))              # doctest: +SKIP
        array([0, 0])
        >>> actions, state = lstm_algo.compute_actions(obs)                  # doctest: +SKIP
        >>> actions, state = lstm_algo.compute_actions(next_obs, state=state)  # doctest: +SKIP
        """
        policy, params, normalizer = acting_parts(self.program, member)
        if state is not None and not policy.recurrent:
            raise ValueError("compute_actions takes a state only for a recurrent policy (use_lstm=True).")
        if self._greedy is None:
            self._greedy = jax.jit(policy.greedy_step if policy.recurrent else policy.greedy)
        obs = np.asarray(observations)
        if obs.shape[1:] != policy.obs_shape:
            raise ValueError(f"compute_actions takes observations [B, *{policy.obs_shape}], got shape {obs.shape}.")
        if not policy.recurrent:
            return greedy_env_actions(self.config, policy, self._greedy, params, obs, normalizer)
        carried = [policy.initial_state(len(obs)) if state is None else state]

        def act(p: Any, x: Any) -> Any:
            carried[0], actions = self._greedy(p, carried[0], x)
            return actions

        actions = greedy_env_actions(self.config, policy, act, params, obs, normalizer)
        return actions, jax.device_get(carried[0])

    def stop(self) -> None:
        """Stops the run's background threads and actors."""
        self.program.stop()


def acting_parts(program: Program, member: int = 0) -> tuple[Policy, Any, Normalizer | None]:
    """``(policy, params, normalizer)`` a standard program acts with now: a Ray run's learner
    weights and observation statistics, or one device-mode member's."""
    if isinstance(program, DeviceProgram):
        return program.policy, program.get_weights(member), program.get_normalizer(member)
    if isinstance(program, RayProgram):
        return program.policy, program.learner.get_weights(), program.workers.normalizer
    raise TypeError(f"{type(program).__name__} runs policies of its own; use its evaluate() instead.")


def find_checkpoint(path: str) -> tuple[str, dict[str, Any]]:
    """The checkpoint ``path`` names, or the newest one under it that verifies, and its metadata."""
    found = checkpoint.search(path)
    return found.path, found.meta


def load_policy(
    path: str, member: int | str | None = None, plan: RestorePlan | None = None
) -> tuple[Any, Policy, Any, Normalizer | None]:
    """``(config, policy, params, normalizer)`` of a checkpoint of a standard program, without
    starting Ray; ``normalizer`` holds the run's observation statistics where it normalized them.
    Of a device-mode run of several members, member ``member`` (see :func:`pick_member`).
    ``plan``: the :func:`~jaxflow.api.restore.plan_restore` of ``path`` where the caller has it."""
    plan = plan or plan_restore(path)
    if plan.template is None:
        raise checkpoint.fail(plan.path, f"{plan.spec.name} runs a program of its own: load it with Algorithm.restore")
    state = checkpoint_state.restore_state(plan.path, plan.template.state)
    if plan.template.program is not None:
        program = plan.template.program
        program.set_state(state)
        chosen = pick_member(plan.path, plan.meta, member, len(program.members))
        return plan.config, program.policy, program.get_weights(chosen), program.get_normalizer(chosen)
    pick_member(plan.path, plan.meta, member, 1)
    if isinstance(state, NormalizedState):
        return plan.config, plan.template.policy, jax.device_get(state.learner.params), state.normalizer
    return plan.config, plan.template.policy, jax.device_get(state.params), None


def pick_member(path: str, meta: dict[str, Any], member: int | str | None, count: int) -> int:
    """The member of checkpoint ``path`` (of ``count``) that ``member`` names: an index,
    :data:`BEST` (the best member its ``meta.json`` marks: a device-mode PBT run's), or None
    (that best member where one is marked, else member 0). Raises :class:`CheckpointError`
    for a member it does not have.

    >>> pick_member("ckpt", {"pbt": {"best_member": 2}}, None, 4), pick_member("ckpt", {}, None, 4)
    (2, 0)
    """
    marked = meta.get("pbt", {}).get("best_member")
    if member is None:
        member = BEST if marked is not None else 0
    if member == BEST:
        if type(marked) is not int or not 0 <= marked < count:
            raise checkpoint.fail(path, "marks no best member (a device-mode PBT run's checkpoints do); name a member")
        return marked
    if type(member) is not int or not 0 <= member < count:
        raise checkpoint.fail(path, f"holds {count} member(s), 0 to {count - 1}; member {member!r} is none of them")
    return member
