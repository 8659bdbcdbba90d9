"""Where Ray puts a run's actors: the resources each one asks for and how a group of them
spreads over a cluster's nodes, checked against the live nodes so that an actor no node
can hold fails with a sentence instead of waiting forever in Ray's queue.

Placement is per actor, through Ray's scheduling strategies, not through a placement
group: a placement group reserves its bundles for its whole life and, when a node dies,
re-reserves the lost ones before anything may run in them, while an actor placed on its
own is scheduled wherever its resources are free at the moment it is (re)created. So a
worker or shard restarted after its node died goes straight to a node that is left, a
dead actor's resources are free at once, and a run resumed in a new process meets no
reservation of the old one.

A run that is itself placed in a placement group (a Ray Tune trial, whose group
``jaxflow.tune`` sizes from the config: the driver's bundle and one per worker) puts its
actors into that group's bundles instead, so that trials never take each other's CPUs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from jaxflow.config.constants import FREE_CPU_PATIENCE_S
from jaxflow.config.fields import ConfigError
from jaxflow.config.groups import PlacementStrategy

RAY_STRATEGIES: dict[str, str] = {"pack": "DEFAULT", "spread": "SPREAD"}
"""Ray's name for each strategy: its default scheduler fills a node (the driver's first)
before it uses the next; SPREAD puts each new actor on the node with the fewest of them."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """What one actor of a group asks Ray's scheduler for, and the group's strategy.

    Example:
        >>> p = Placement(num_cpus=1, resources={"rollout": 1}, strategy="spread")
        >>> p.request()
        {'CPU': 1, 'rollout': 1}
        >>> p.options()["scheduling_strategy"]
        'SPREAD'
    """

    num_cpus: float = 0.0
    num_gpus: float = 0.0
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    strategy: PlacementStrategy = "pack"

    def request(self) -> dict[str, float]:
        """The resources one actor needs on the node it runs on (those above 0)."""
        wanted = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {name: amount for name, amount in wanted.items() if amount > 0}

    def options(self) -> dict[str, Any]:
        """Keyword options for ``ray.remote(cls).options`` (through ``jax_actor``): in the
        placement group this process runs in, if any (a Tune trial's), else by the strategy."""
        group = current_group()
        return dict(
            num_cpus=self.num_cpus,
            num_gpus=self.num_gpus,
            resources=dict(self.resources),
            scheduling_strategy=RAY_STRATEGIES[self.strategy]
            if group is None
            else PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True),
        )

    def fits_a_live_node(self) -> bool:
        """Whether some live node of the cluster has, in all, what one actor asks for."""
        need = self.request()
        return any(
            all(node["Resources"].get(name, 0) >= amount for name, amount in need.items())
            for node in ray.nodes()
            if node["Alive"]
        )

    def check_room(self, count: int, what: str, patience_s: float = FREE_CPU_PATIENCE_S) -> None:
        """Raises :class:`ConfigError` unless ``count`` actors, ``what`` (e.g. "rollout
        workers (num_workers=2)"), can be placed now: one fits on some live node, and the cluster has the
        resources of all of them free (waiting up to ``patience_s`` for those of actors
        killed a moment ago). Ray would otherwise queue them forever."""
        if not self.fits_a_live_node():
            nodes = [
                {k: v for k, v in n["Resources"].items() if not k.startswith("node:")}
                for n in ray.nodes()
                if n["Alive"]
            ]
            raise ConfigError(
                f"{what} need {self.request()} each, but no live node of the Ray cluster has that; "
                f"the nodes have {nodes}. Start nodes with those resources (ray start --resources=...) or change the setting."
            )
        need = {name: amount * count for name, amount in self.request().items()}
        group = current_group()
        cluster = ray.cluster_resources()
        if group is None and any(amount > cluster.get(name, 0) for name, amount in need.items()):
            patience_s = 0.0  # more than the whole cluster has: no actor's release would make room
        short = _short_of(need, group, patience_s)
        if short and group is not None:
            raise ConfigError(
                f"{what} need {need} in all, but this run's placement group (a Tune trial's) has only "
                f"{short} free of its bundles {group.bundle_specs}; give the trial room for them."
            )
        if short:
            total = {name: ray.cluster_resources().get(name, 0) for name in short}
            raise ConfigError(
                f"{what} need {need} in all, but the Ray cluster has only {short} free (of {total}; another run "
                "may hold the rest); run fewer, ask less of each, or stop the other run."
            )


def _short_of(need: Mapping[str, float], group: PlacementGroup | None, patience_s: float) -> dict[str, float]:
    """Of the resources in ``need``, those the cluster (or ``group``, where Ray names its free
    ones ``CPU_group_<id>``) has less of free, with what it has, waiting up to ``patience_s``."""
    suffix = "" if group is None else f"_group_{group.id.hex()}"
    free = _free_resources({f"{name}{suffix}": amount for name, amount in need.items()}, patience_s)
    return {
        name: free.get(f"{name}{suffix}", 0) for name, amount in need.items() if free.get(f"{name}{suffix}", 0) < amount
    }


def _free_resources(need: Mapping[str, float], patience_s: float) -> dict[str, float]:
    """The cluster's free resources, waiting up to ``patience_s`` for ``need`` of them:
    actors killed a moment ago release theirs asynchronously."""
    deadline = time.monotonic() + patience_s
    while True:
        free = ray.available_resources()
        if all(free.get(k, 0) >= v for k, v in need.items()) or time.monotonic() > deadline:
            return free
        time.sleep(0.1)


def wait_placed(
    ref: ray.ObjectRef, placement: Placement, what: str, timeout_s: float, placement_timeout_s: float
) -> Any:
    """``ray.get(ref)`` of a new actor's first call, up to ``timeout_s``; after
    ``placement_timeout_s`` with no live node able to hold the actor (its node left and
    no other with its resources joined), raises :class:`ActorPlacementError` naming ``what``."""
    start = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - start)
        ready, _ = ray.wait([ref], timeout=max(0.0, min(left, placement_timeout_s)))
        if ready:
            return ray.get(ref)
        check_placeable(placement, what, time.monotonic() - start, placement_timeout_s)
        if time.monotonic() - start >= timeout_s:
            raise TimeoutError(f"{what} did not answer within {timeout_s:g} s of its start.")


def check_placeable(placement: Placement, what: str, waited_s: float, placement_timeout_s: float) -> None:
    """Raises :class:`ActorPlacementError` once an actor has waited ``placement_timeout_s``
    for a node that no live node can be."""
    if waited_s >= placement_timeout_s and not placement.fits_a_live_node():
        raise ActorPlacementError(
            f"{what} cannot be placed: no live node of the Ray cluster has {placement.request()} "
            f"(waited {waited_s:.0f} s; placement_timeout_s={placement_timeout_s:g}). "
            "Its node may have left; add a node with those resources or change the setting."
        )


class ActorPlacementError(ConfigError):
    """An actor that no live node of the Ray cluster can hold: the config asks for
    resources the cluster does not have (any more), a user's error like the up-front check's."""


def lost_with_its_node(error: BaseException) -> bool:
    """Whether an actor died of something other than its own start-up code (its node
    left, say), so that creating it again may succeed."""
    return isinstance(error, ray.exceptions.RayActorError) and not error.actor_init_failed


def beside_driver() -> dict[str, Any]:
    """Actor options that put a 0-CPU actor on the driver's node, where it never takes a
    resource the workers were given and is lost only with the driver itself. The affinity
    is hard: that node lives as long as the run, and Ray's soft affinity sends an actor with
    a runtime env (every ``jax_actor``) to other nodes at times."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id(), soft=False))


def current_group() -> PlacementGroup | None:
    """The placement group this process runs in and whose bundles its actors go into (a Tune
    trial's), or None: Ray not started here, or not in a group."""
    return get_current_placement_group() if ray.is_initialized() else None


def node_id() -> str:
    """The Ray node this process runs on (an actor's answer to "where are you?")."""
    return ray.get_runtime_context().get_node_id()


def driver_node_id() -> str | None:
    """The driver's Ray node, for the parts of a run that live in its process (a worker or
    replay with ``num_workers=0``); None where the run never started Ray: asking Ray's
    runtime context would start it."""
    return node_id() if ray.is_initialized() else None
