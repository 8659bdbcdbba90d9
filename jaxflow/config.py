"""Frozen, validated algorithm configs and their parsing from ``--set FIELD=VALUE``.

A config field is declared with :func:`param`, which records its constraint; a
config class calls :func:`validate` from ``__post_init__`` so an invalid config
never exists -- it fails on construction, before any actor starts, naming the
field and the allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from typing import Any, Callable, Literal, Mapping

class ConfigError(ValueError):
    """An invalid config field, value, or combination."""


@dataclasses.dataclass(frozen=True)
class Check:
    """A constraint on a number: ``low < x`` (or ``<=`` when ``low_inclusive``), and so on."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True

    def __call__(self, x: float) -> bool:
        if x is None:  # an optional field left unset
            return True
        if x != x:  # NaN satisfies no bound, but fails none of the comparisons below
            return False
        if self.low is not None and (x < self.low or (x == self.low and not self.low_inclusive)):
            return False
        if self.high is not None and (x > self.high or (x == self.high and not self.high_inclusive)):
            return False
        return True

    def __str__(self) -> str:
        lo = "" if self.low is None else f"{self.low} {'<=' if self.low_inclusive else '<'} "
        hi = "" if self.high is None else f" {'<=' if self.high_inclusive else '<'} {self.high}"
        return f"{lo}value{hi}"


POSITIVE = Check(low=0, low_inclusive=False)
NON_NEGATIVE = Check(low=0)
UNIT = Check(low=0, high=1)


def param(default: Any, check: Check | None = None, *, factory: Callable[[], Any] | None = None) -> Any:
    """A config field with an optional numeric constraint checked by :func:`validate`."""
    meta = {"check": check} if check else {}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, t) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_type_ok(v, args[0]) for v in value)
        return len(args) == len(value) and all(_type_ok(v, t) for v, t in zip(value, args))
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return isinstance(value, Mapping)
    return isinstance(value, origin or tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def validate(config: Any) -> None:
    """Checks every field's type and constraint; raises :class:`ConfigError` naming the first bad one."""
    name = type(config).__name__
    hints = _hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not _type_ok(value, hints[f.name]):
            raise ConfigError(f"{name}.{f.name} must be {_type_name(hints[f.name])}, got {value!r}.")
        check = f.metadata.get("check")
        if check is not None and not check(value):
            raise ConfigError(f"{name}.{f.name} must satisfy {check}, got {value!r}.")


def require(condition: bool, message: str) -> None:
    """Raises :class:`ConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def parse_value(cls: type, field: str, text: str) -> Any:
    """Parses the string ``text`` as a value of ``cls.field``'s declared type."""
    if field not in field_names(cls):
        close = difflib.get_close_matches(field, field_names(cls), n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ConfigError(
            f"{cls.__name__} has no field {field!r}.{hint} Fields: {', '.join(field_names(cls))}."
        )
    tp = _hints(cls)[field]
    try:
        return _parse(text, tp)
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{cls.__name__}.{field} must be {_type_name(tp)}, got {text!r}.") from e


def _parse(text: str, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.lower() in ("none", "null"):
            return None
        for t in args:
            if t is type(None):
                continue
            try:
                return _parse(text, t)
            except (ValueError, TypeError, json.JSONDecodeError):
                continue
        raise ValueError(text)
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    if tp is str or origin is Literal:
        return text
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_parse(t.strip(), item) for t in text.strip("()[] ").split(",") if t.strip())
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(text)
        return value
    raise TypeError(f"cannot parse {tp}")


def with_overrides(config: Any, overrides: Mapping[str, str]) -> Any:
    """A new config with string overrides (from ``--set``) parsed and validated."""
    values = {k: parse_value(type(config), k, v) for k, v in overrides.items()}
    return dataclasses.replace(config, **values)


def to_json_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON values (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def from_json_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """Rebuilds a config written by :func:`to_json_dict`, restoring tuples."""
    hints = _hints(cls)
    values = {}
    for k, v in data.items():
        if k not in hints:
            raise ConfigError(f"{cls.__name__} has no field {k!r} (from a saved config).")
        values[k] = tuple(v) if typing.get_origin(hints[k]) is tuple else v
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    """Fields every algorithm shares; algorithm configs extend this dataclass."""

    on_policy = False  # not a field: on-policy algorithms set it, and cannot sample ahead

    env: str = "CartPole-v1"
    """Environment id, see `jaxflow list`."""
    env_config: dict = param(None, factory=dict)
    """Keyword arguments for the environment's constructor."""
    num_workers: int = param(2, NON_NEGATIVE)
    """Ray rollout worker actors; 0 samples in the driver process."""
    num_envs_per_worker: int = param(8, POSITIVE)
    """Environments stepped in lockstep by each worker."""
    rollout_fragment_length: int = param(64, POSITIVE)
    """Time steps T per sampled fragment; each fragment is [T, num_envs_per_worker]."""
    seed: int = param(0, NON_NEGATIVE)
    """Seeds parameters, learner RNG, and every environment copy."""
    lr: float = param(3e-4, POSITIVE)
    """Learning rate of the Adam optimizer."""
    gamma: float = param(0.99, UNIT)
    """Discount factor."""
    max_grad_norm: float = param(0.5, POSITIVE)
    """Gradients are clipped to this global norm."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the MLP torso's layers (flat observations)."""
    conv_torso: Literal["nature", "impala"] = "nature"
    """Convolutional torso for image observations ([k, H, W] frame stacks): Nature DQN's CNN or IMPALA's ResNet."""
    vector_env: Literal["python", "ale"] = "python"
    """How a worker steps its environments: one after another in Python, or (ALE/<Game>-v5 ids
    only) in ale-py's C++ vector environment, on ``num_cpus_per_worker`` threads."""
    num_env_groups: int = param(1, POSITIVE)
    """vector_env='ale': a worker's environments split into this many groups stepped in turn
    (2: double buffering), so one group's emulators run while the worker waits for the policy
    on another; must divide num_envs_per_worker. Each group has num_cpus_per_worker emulator
    threads, so whichever group is stepping alone can use all of the worker's CPUs; while
    groups overlap, their threads share those CPUs."""
    sample_async: bool = False
    """Rollout workers step their envs in a background thread one fragment ahead of the
    plan's requests (RLlib's sample_async), so postprocessing, encoding and returning a
    fragment overlap stepping the next; fragments then act with weights up to one fragment
    older. Off-policy and V-trace algorithms only."""
    on_worker_failure: Literal["raise", "ignore", "restart"] = "raise"
    """What a dead rollout worker does to the run: raise, carry on without it, or recreate it."""
    worker_timeout_s: float = param(120.0, POSITIVE)
    """A worker silent for this long is treated as dead (a hang)."""
    num_cpus_per_worker: float = param(1.0, NON_NEGATIVE)
    """CPUs Ray reserves for each rollout worker."""
    num_gpus_per_worker: float = param(0.0, NON_NEGATIVE)
    """GPUs (a fraction: workers share one) Ray reserves for each rollout worker; above 0 the
    worker's policy acts on that GPU instead of the worker's CPU, which then only steps envs
    (with num_workers=0 the driver's worker acts on the driver's default device either way)."""
    metrics_num_episodes: int = param(100, POSITIVE)
    """episode_return_mean averages this many most recent episodes."""
    min_env_steps_per_iteration: int = param(0, NON_NEGATIVE)
    """A training iteration lasts at least this many sampled env steps."""
    mode: Literal["auto", "ray", "device"] = "auto"
    """Ray rollout workers, or rollout and update compiled together on the device (gymnax envs
    only); "auto" picks device mode for a gymnax env when the algorithm has one."""
    num_envs: int | None = param(None, POSITIVE)
    """Device mode: environments stepped together (None: num_workers x num_envs_per_worker,
    the batch Ray mode samples per round); a training batch is num_envs x rollout_fragment_length."""
    iterations_per_call: int = param(10, POSITIVE)
    """Device mode: training iterations (rollout + update) compiled into one call."""
    num_seeds: int = param(1, POSITIVE)
    """Device mode: independent agents with seeds seed, seed + 1, ... trained in one compiled call."""
    sweep: dict = param(None, factory=dict)
    """Device mode: one numeric field and its values, {"lr": [1e-4, 3e-4]}; each value trains
    num_seeds agents, all in one compiled call."""
    member_batching: Literal["auto", "vmap", "map"] = "auto"
    """Device mode, several agents: vmap them (parallel, memory x agents) or run them one after
    another in the compiled call (lax.map: each agent's arithmetic is its single run's, bit for
    bit); auto is vmap on accelerators and map on CPUs."""

    def __post_init__(self) -> None:
        validate(self)
        self._validate_sweep()
        require(all(h > 0 for h in self.hidden_sizes), f"hidden_sizes must be positive, got {self.hidden_sizes}.")
        require(self.vector_env != "ale" or self.env.startswith("ALE/"),
                f"vector_env='ale' runs ALE/<Game>-v5 environments only, not {self.env!r}; use vector_env='python'.")
        require(self.num_env_groups == 1 or self.vector_env == "ale",
                f"num_env_groups={self.num_env_groups} needs vector_env='ale' (python envs step in the worker's thread).")
        require(not (self.sample_async and self.on_policy),
                f"{type(self).__name__}.sample_async=True: this algorithm trains on-policy, and a worker sampling "
                "ahead acts with weights one update old; use it with IMPALA, APPO, DQN or APEX.")
        require(self.num_envs_per_worker % self.num_env_groups == 0,
                f"num_env_groups={self.num_env_groups} must divide num_envs_per_worker={self.num_envs_per_worker}.")

    def _validate_sweep(self) -> None:
        if not self.sweep:
            return
        name = type(self).__name__
        require(len(self.sweep) == 1, f"{name}.sweep takes one field, got {sorted(self.sweep)}.")
        field, values = next(iter(self.sweep.items()))
        hints = _hints(type(self))
        require(field in hints and field != "sweep",
                f"{name}.sweep: no field {field!r}. Fields: {', '.join(field_names(type(self)))}.")
        require(hints[field] is float, f"{name}.sweep: {field!r} is not a float field; only numeric fields "
                f"({', '.join(f for f, t in hints.items() if t is float)}) can be swept.")
        require(isinstance(values, (list, tuple)) and len(values) > 0 and all(_type_ok(v, float) for v in values),
                f"{name}.sweep[{field!r}] must be a non-empty list of numbers, got {values!r}.")
        for v in values:  # each value must be valid where the field itself is set
            dataclasses.replace(self, sweep={}, **{field: float(v)})
