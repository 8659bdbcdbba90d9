"""What resuming a run decides before anything starts: which checkpoint (the newest that
verifies), whether its saved state fits the config it will be loaded into (overrides
included), and which run directory continues. Standard programs are checked here, without
Ray; programs of their own are checked by :meth:`~jaxflow.api.algorithm.Algorithm.load`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from jaxflow.api import checkpoint, checkpoint_state, user_modules
from jaxflow.api.program import resolve_mode
from jaxflow.api.ray_program import NormalizedState, build_learner
from jaxflow.api.registry import get_algorithm
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.api.storage import local_copy
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import replace_config
from jaxflow.config.off_policy import OffPolicyConfig
from jaxflow.config.parsing import from_json_dict, parse_value
from jaxflow.replay.saved import RECORD_KEY
from jaxflow.rollout.normalize import normalizer_init

REFUSED_OVERRIDES = "--set on resume may change only fields that leave the learner state's shapes alone"


class Template(NamedTuple):
    """The state a standard program saves for a config, built without Ray: ``state`` (the
    learner's, in a :class:`NormalizedState` where the run normalizes, or a device program's),
    the ``policy``, and in device mode the ``program`` itself (ready to load into)."""

    state: Any
    policy: Any
    program: Any


def state_template(config: Any, spec: AlgorithmSpec) -> Template:
    """The :class:`Template` of a standard program (``spec.run.program is None``)."""
    from jaxflow.api.spaces import env_spaces
    from jaxflow.ondevice.program import DeviceProgram

    if resolve_mode(config, spec) == "device":
        program = DeviceProgram(config, spec)
        return Template(program.get_state(), program.policy, program)
    policy, learner = build_learner(config, spec)
    stats = normalizer_init(config, tuple(env_spaces(config, spec)[0].shape or ()))
    state = learner.get_state()
    return Template(state if stats is None else NormalizedState(state, stats), policy, None)


class RestorePlan(NamedTuple):
    """A verified checkpoint and the config to continue it with; ``template`` is None for
    programs of their own; ``skipped`` lists newer checkpoints that did not verify, and why."""

    path: str
    meta: dict[str, Any]
    spec: AlgorithmSpec
    config: Any
    template: Template | None
    skipped: list[tuple[str, str]]


def plan_restore(
    path: str, overrides: Mapping[str, Any] | None = None, from_strings: bool = False, warn: bool = True
) -> RestorePlan:
    """The newest checkpoint at or under ``path`` that verifies and whose state fits its
    config, with ``overrides`` (flat or dotted names; strings parsed per field where
    ``from_strings``) applied. Raises :class:`~jaxflow.api.checkpoint.CheckpointError` (one
    line) when none fits, or when the overrides would change the state's shapes. A storage
    URI's run (or checkpoint) is first pulled into a local cache (:func:`~jaxflow.api.storage.local_copy`).
    The user's modules the run imported are imported first (:mod:`~jaxflow.api.user_modules`); an env
    or model its config names that is unknown here raises a one-line
    :class:`~jaxflow.api.user_modules.MissingNameError` naming it and any of those modules missing.
    Newer checkpoints it skips are logged as warnings unless not ``warn`` (the plan's ``skipped`` lists them)."""
    path = local_copy(path)
    templates: dict[str, Template | None] = {}

    def fits(ckpt: str, meta: dict[str, Any]) -> None:
        spec = get_algorithm(meta["algorithm"])
        missing = user_modules.import_remembered(user_modules.remembered(ckpt, meta))  # the run's envs and models
        template = None
        if spec.run.program is None:
            config = from_json_dict(spec.config_cls, meta["config"])
            try:
                template = state_template(config, spec)
            except (ConfigError, KeyError, ImportError, AttributeError) as e:  # KeyError: envs.UnknownEnvError
                if user_modules.is_missing_name(e):  # an intact checkpoint: not skipped as one that does not verify
                    raise user_modules.missing_name(ckpt, config, e, missing) from e
                why = e.args[0] if isinstance(e, KeyError) and e.args else e  # a KeyError's str() is quoted
                raise checkpoint.fail(ckpt, f"its {spec.name} config does not build: {why}") from e
            checkpoint_state.check_shapes(ckpt, template.state)
        templates[ckpt] = template

    found = checkpoint.search(path, fits, warn)
    spec = get_algorithm(found.meta["algorithm"])
    config = from_json_dict(spec.config_cls, found.meta["config"])
    template = templates[found.path]
    if overrides:
        values = {k: parse_value(spec.config_cls, k, v) if from_strings else v for k, v in overrides.items()}
        config = replace_config(config, **values)
        if template is not None:
            template = _refuse_reshaping(found.path, config, spec, values)
    _refuse_replay_layout(found.path, found.meta, config)
    return RestorePlan(found.path, found.meta, spec, config, template, found.skipped)


def _refuse_reshaping(ckpt: str, config: Any, spec: AlgorithmSpec, overrides: Mapping[str, Any]) -> Template:
    """The template of the overridden ``config``, which must fit the saved state; otherwise
    the error names the overrides that do not fit on their own (or all, if only together)."""
    template = state_template(config, spec)
    try:
        checkpoint_state.check_shapes(ckpt, template.state)
        return template
    except checkpoint.CheckpointError as e:
        why = str(e).split(": ", 1)[1]
    saved = from_json_dict(spec.config_cls, checkpoint.load_meta(ckpt)["config"])
    refused = [k for k, v in overrides.items() if not _fits(ckpt, replace_config(saved, **{k: v}), spec)]
    raise checkpoint.fail(ckpt, f"{REFUSED_OVERRIDES}; refused: {', '.join(refused or list(overrides))} ({why})")


def _refuse_replay_layout(ckpt: str, meta: Mapping[str, Any], config: Any) -> None:
    """Refuses a config whose replay shards could not take the checkpoint's (another number
    of shards, or capacity), before anything starts; ``meta``'s record has been verified."""
    record = meta.get(RECORD_KEY)
    if not isinstance(config, OffPolicyConfig) or not isinstance(record, list):
        return  # no replay shards, or a multi-agent run's (checked by each policy's shards)
    saved = (len(record), sorted({r["capacity"] for r in record}))
    wanted = (config.num_replay_shards, [config.replay_shard_capacity])
    if saved != wanted:
        raise checkpoint.fail(
            ckpt,
            f"its replay is {saved[0]} shards of capacity {saved[1]}, this config's would be {wanted[0]} of "
            f"{wanted[1][0]}; num_replay_shards and buffer_size must be the checkpoint's",
        )
    saved_config = from_json_dict(type(config), meta["config"])
    changed = [f for f in type(config).replay_layout if _dotted(saved_config, f) != _dotted(config, f)]
    if changed:
        was = ", ".join(f"{f}={_dotted(saved_config, f)!r}" for f in changed)
        raise checkpoint.fail(ckpt, f"its replay was kept with {was}; a resume must keep {', '.join(changed)}")


def _dotted(config: Any, field: str) -> Any:
    for name in field.split("."):
        config = getattr(config, name)
    return config


def _fits(ckpt: str, config: Any, spec: AlgorithmSpec) -> bool:
    try:
        checkpoint_state.check_shapes(ckpt, state_template(config, spec).state)
    except checkpoint.CheckpointError:
        return False
    return True


def run_directory(path: str) -> str:
    """The run a resume path continues: ``path`` itself when it holds checkpoints, the folder
    above when it names one checkpoint -- refused when that run has newer checkpoints, which
    resuming from an older one would overwrite."""
    path = os.path.abspath(path)
    if not checkpoint.is_checkpoint(path):
        return path
    run = os.path.dirname(path)
    iteration = checkpoint.iteration_of(path)
    newer = [c for c in checkpoint.candidates(run) if checkpoint.iteration_of(c) > iteration]
    if newer:
        names = ", ".join(os.path.basename(c) for c in newer[:3]) + (" ..." if len(newer) > 3 else "")
        raise checkpoint.fail(
            path, f"{run} has newer checkpoints ({names}); resume with --resume {run} to continue from the newest"
        )
    return run
