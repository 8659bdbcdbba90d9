"""Generic dataflow: lazy iterators over local items and Ray actors, and their concurrency
(RLlib Flow's iterator layer). Nothing here knows about reinforcement learning."""

from jaxflow.dataflow.actors import (
    ActorPool,
    ActorSource,
    ParallelIterator,
    WorkerError,
    from_actors,
    jax_actor,
    ship_by_value,
)
from jaxflow.dataflow.concurrency import Concurrently, put
from jaxflow.dataflow.context import FlowContext
from jaxflow.dataflow.iterators import NOT_READY, BackpressureError, LocalIterator, Operator, from_items, from_iterator
from jaxflow.dataflow.placement import ActorPlacementError, Placement
from jaxflow.dataflow.producer import Producer, ProducerError, merged

__all__ = [
    "NOT_READY",
    "ActorPlacementError",
    "ActorPool",
    "ActorSource",
    "BackpressureError",
    "Concurrently",
    "FlowContext",
    "LocalIterator",
    "Operator",
    "ParallelIterator",
    "Placement",
    "Producer",
    "ProducerError",
    "WorkerError",
    "from_actors",
    "from_items",
    "from_iterator",
    "jax_actor",
    "merged",
    "put",
    "ship_by_value",
]
