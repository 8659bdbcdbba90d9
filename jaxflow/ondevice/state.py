"""A device-mode run's state: every member's :class:`AnakinState`, and where its arrays live on
the local devices (:func:`state_shardings`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxflow.learn.sgd import TrainState
from jaxflow.ondevice.pbt import PBTState
from jaxflow.ondevice.rollout import EnvCarry

Array = jax.Array


class AnakinState(NamedTuple):
    """Everything a member needs to continue, bit for bit: saved and restored as one pytree."""

    train: TrainState
    envs: EnvCarry
    key: Array
    iteration: Array
    """Training iterations done (int32 scalar)."""
    hyper: dict[str, Array]
    """The member's values of the swept field and of the fields PBT perturbs ({} without either)."""
    replay: Any = None
    pbt: PBTState | None = None
    """The member's population-based training record (None without PBT)."""


def state_shardings(state: AnakinState, mesh: Mesh) -> Any:
    """Where each array of ``state`` (members stacked on a leading axis) lives on ``mesh``'s
    ``batch`` axis: the environments split along their batch axis, everything else replicated.

    Example:
        >>> import numpy as np
        >>> mesh = Mesh(np.asarray(jax.local_devices()), ("batch",))
        >>> carry = EnvCarry(None, np.zeros((1, 4, 3)), np.zeros((1, 4)), np.zeros((1, 4), np.int32))
        >>> state = AnakinState({"w": np.zeros((1, 3))}, carry, np.zeros((1, 2)), np.zeros(1), {})
        >>> shardings = state_shardings(state, mesh)
        >>> shardings.train["w"].spec == PartitionSpec(), shardings.envs.obs.spec == PartitionSpec(None, "batch")
        (True, True)
    """
    replicated = NamedSharding(mesh, PartitionSpec())
    env_sharding = NamedSharding(mesh, PartitionSpec(None, "batch"))
    return state._replace(
        **{f: jax.tree.map(lambda _: replicated, getattr(state, f)) for f in AnakinState._fields if f != "envs"},
        # The statistics are the run's, not per env: replicated like the parameters.
        envs=jax.tree.map(lambda _: env_sharding, state.envs)._replace(
            normalizer=jax.tree.map(lambda _: replicated, state.envs.normalizer)
        ),
    )
