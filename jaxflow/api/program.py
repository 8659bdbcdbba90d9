"""A run of any kind, as :class:`~jaxflow.api.algorithm.Algorithm` drives it: the
:class:`Program` protocol, and how a config chooses its program.

Like optax's ``GradientTransformation`` (a whole abstraction as a pair of functions), a
program is the few calls a run needs: its stream of results, its state for checkpoints,
its own evaluation, and a way to stop. Ray runs (workers + learner + plan), device runs
(rollout and update compiled together), multi-agent runs and MAML all implement it, so
``Algorithm`` has no branch for any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from jaxflow import envs
from jaxflow.api.registry import device_algorithms
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.config.fields import ConfigError
from jaxflow.dataflow.iterators import LocalIterator


class CheckpointFiles(Protocol):
    """State a program keeps outside its pytree (replay contents), written into each
    checkpoint directory before the checkpoint is renamed into place."""

    def settle(self) -> None:
        """Waits for the writes to them still in flight (replay stores, priority updates), so
        that they and the counters saved beside them agree; called before the counters are read."""

    def save(self, directory: str) -> Mapping[str, Any]:
        """Writes the files into ``directory``; returns what ``meta.json`` records of them (JSON)."""

    def saved_at(self, directory: str) -> None:
        """Told where the checkpoint holding them ended up (after the rename)."""

    def load(self, directory: str) -> object:
        """Reads them back from a checkpoint."""


class Program(Protocol):
    """One run: what :class:`~jaxflow.api.algorithm.Algorithm` needs of any kind of run.

    ``results()`` is the plan's output, one result dict per training iteration; its
    ``context`` holds the counters that checkpoints save. ``get_state()`` is a pytree of
    arrays (saved with orbax) and ``set_state`` takes one of the same structure back.
    ``files`` is None or the :class:`CheckpointFiles` saved beside that state.

    Example:
        >>> program = standard_program(PPOConfig(), get_algorithm("PPO"), "ray")  # doctest: +SKIP
        >>> next(program.results())["episode_return_mean"]                      # doctest: +SKIP
    """

    @property
    def files(self) -> CheckpointFiles | None:
        """Files saved beside the state in every checkpoint (replay contents), or None."""

    def results(self) -> LocalIterator[dict[str, Any]]:
        """The stream of results (the same iterator on every call)."""

    def get_state(self) -> Any:
        """Everything to continue from, as a pytree of host arrays."""

    def set_state(self, state: Any) -> None:
        """Continues from a state :meth:`get_state` returned."""

    def evaluate(self, episodes: int, seed: int | None, member: int) -> dict[str, Any]:
        """The run's greedy policy (of agent ``member``) for ``episodes`` episodes."""

    def stop(self) -> None:
        """Stops the run's threads and actors and waits for them."""


def standard_program(config: Any, spec: AlgorithmSpec, mode: str, callbacks: Sequence[Any] = ()) -> Program:
    """The program of an algorithm made of a plan (and optionally a device mode): Ray
    rollout workers + learner + plan, or rollout and update compiled on the device; either
    calls the ``on_episode_end`` of ``callbacks`` where episodes end."""
    from jaxflow.api.ray_program import RayProgram
    from jaxflow.api.spaces import env_spaces
    from jaxflow.ondevice.program import DeviceProgram

    if mode == "device":
        env_spaces(config, spec)  # refused before anything compiles
        return DeviceProgram(config, spec, callbacks)
    return RayProgram(config, spec, callbacks)


def build_program(config: Any, spec: AlgorithmSpec, callbacks: Sequence[Any] = ()) -> Program:
    """The program ``config`` runs: the algorithm's own, or the standard one in the mode
    :func:`resolve_mode` chooses (given the run's ``callbacks``; a program of its own calls
    only those ``Algorithm`` calls)."""
    mode = resolve_mode(config, spec)
    if spec.run.program is not None:
        return spec.run.program(config, spec, mode)
    return standard_program(config, spec, mode, callbacks)


def resolve_mode(config: Any, spec: AlgorithmSpec) -> str:
    """``"ray"`` or ``"device"`` for ``config.mode``; "auto" is device mode for a JAX env
    (gymnax or brax) when the algorithm has one (an algorithm with its own ``program`` decides for itself what
    "auto" means). Raises :class:`ConfigError` for a mode that cannot run."""
    if spec.run.program is not None:
        return config.mode
    kind = envs.entry(config.env).kind
    if kind == "multiagent":
        raise ConfigError(
            f"{type(config).__name__}.env {config.env!r} is a multi-agent environment: train it with a "
            "multi-agent config (jaxflow train --multiagent FILE), which maps its agents to policies."
        )
    can_device = kind in envs.JAX_KINDS and spec.run.device is not None
    name = type(config).__name__
    if config.mode == "device" and not can_device:
        why = (
            f"{spec.name} has no device mode (algorithms with one: {', '.join(device_algorithms())})"
            if spec.run.device is None
            else f"{config.env!r} is not a JAX environment (device mode runs gymnax/<id> and brax/<name> envs)"
        )
        raise ConfigError(f"{name}.mode='device' is not possible: {why}. Allowed: 'ray' or 'auto'.")
    mode = "device" if config.mode == "device" or (config.mode == "auto" and can_device) else "ray"
    modes = type(config).recurrent_modes
    if config.use_lstm and mode not in modes:
        hint = "set mode='ray'" if "ray" in modes else "device mode runs gymnax/<id> and brax/<name> envs"
        raise ConfigError(
            f"{name}.use_lstm=True: {spec.name}'s recurrent policies train in {' or '.join(modes)} mode only so far, "
            f"and {config.env!r} runs in {mode} mode ({hint})."
        )
    if mode == "ray" and (config.device.num_seeds > 1 or config.device.sweep or config.device.pbt):
        raise ConfigError(
            f"{name}.num_seeds > 1, {name}.sweep and {name}.pbt need device mode (a gymnax/<id> or brax/<name> env and one of "
            f"{', '.join(device_algorithms())}); this run is in Ray mode."
        )
    if mode == "device" and config.num_learners > 1:
        raise ConfigError(f"{name}.num_learners > 1 is for Ray mode; device mode trains on one process's devices.")
    if mode == "ray" and config.deterministic and type(config).asynchronous_plan:
        where = (
            "it is deterministic in device mode (gymnax/<id> and brax/<name> envs)"
            if spec.run.device is not None
            else "it has no deterministic plan"
        )
        raise ConfigError(
            f"{name}.deterministic=True: {spec.name}'s Ray-mode plan is asynchronous by design "
            f"({type(config).asynchronous_plan}); {where}. Set deterministic=False."
        )
    return mode
