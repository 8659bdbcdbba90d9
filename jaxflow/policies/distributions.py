"""Action distributions: how a policy turns its network's output into actions.

A distribution takes the network's *distribution inputs* for a batch, ``[B, D]`` (logits
for a categorical, means and log-stds for a Gaussian), and gives what each user of a policy
needs: samples and their log-probabilities in JAX (device mode, losses), the same samples
drawn in numpy on a rollout worker's host, the greedy action (evaluation), entropy, a
``distrax`` distribution for anything else a loss wants, and the map of an action onto the
environment's space (:meth:`ActionDistribution.to_env`). :func:`distribution_for` picks one
from a gymnasium action space; the classes live in :mod:`~jaxflow.policies.categorical` and
:mod:`~jaxflow.policies.gaussian`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import jax
import numpy as np

from jaxflow.policies.categorical import Categorical, MultiCategorical
from jaxflow.policies.gaussian import BoxBounds, Deterministic, Gaussian, SquashedGaussian

if TYPE_CHECKING:  # to_distrax imports it when called: a rollout worker never needs it (0.5 s of its start)
    import distrax

Array = jax.Array


class ActionDistribution(Protocol):
    """What acting, learning and evaluation need of a policy's action distribution.

    ``sample_host`` draws from the same distribution as ``sample``, in numpy: on a rollout
    worker's CPU, drawing with JAX's counter-based PRNG inside the compiled policy costs
    more than the network itself, so workers sample on the host.
    """

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action (``()`` for a discrete action)."""
        ...

    @property
    def action_dtype(self) -> Any:
        """Numpy dtype of an action."""
        ...

    @property
    def num_inputs(self) -> int:
        """``D``: how many distribution inputs the network gives per observation."""
        ...

    @property
    def num_free_inputs(self) -> int:
        """How many of the ``D`` inputs (the last ones) are parameters of the network rather
        than functions of the observation (a state-independent log-std), else 0."""
        ...

    def sample(self, key: Array, inputs: Array) -> tuple[Array, Array]:
        """Actions ``[B, *action_shape]`` and their log-probabilities ``[B]`` (JAX)."""
        ...

    def log_prob(self, inputs: Array, actions: Array) -> Array:
        """Log-probabilities ``[B]`` of ``actions`` (JAX)."""
        ...

    def entropy(self, inputs: Array) -> Array:
        """Entropies ``[B]`` (JAX)."""
        ...

    def mode(self, inputs: Array) -> Array:
        """The most likely actions (JAX): what a greedy evaluation plays."""
        ...

    def sample_host(self, rng: np.random.Generator, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sample`` in numpy, on the host."""
        ...

    def to_distrax(self, inputs: Array) -> distrax.Distribution:
        """The distribution as a ``distrax`` object."""
        ...

    def to_env(self, actions: Any) -> Any:
        """Actions as the environment takes them (numpy or JAX, as given): a ``Box``'s
        actions rescaled from ``[-1, 1]`` to its bounds; discrete ones unchanged."""
        ...


BOX_KINDS = ("gaussian", "squashed", "deterministic")
"""How a policy acts in a ``Box``: :class:`Gaussian`, :class:`SquashedGaussian`, :class:`Deterministic`."""


def distribution_for(action_space: Any, box: str = "gaussian", state_dependent_std: bool = False) -> ActionDistribution:
    """The action distribution of a policy acting in ``action_space`` (a gymnasium space):
    categorical for ``Discrete``, independent categoricals for ``MultiDiscrete``, and for a
    1-D ``Box`` with finite bounds the kind named by ``box`` (one of :data:`BOX_KINDS`).
    Other spaces raise ``TypeError`` naming what is supported.

    Example:
        >>> import gymnasium
        >>> distribution_for(gymnasium.spaces.Box(-2.0, 2.0, (1,))).num_inputs
        2
    """
    import gymnasium

    if isinstance(action_space, gymnasium.spaces.Discrete):
        return Categorical(int(action_space.n))
    if isinstance(action_space, gymnasium.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return MultiCategorical(tuple(int(n) for n in action_space.nvec))
    if isinstance(action_space, gymnasium.spaces.Box):
        if len(action_space.shape) != 1:
            raise TypeError(f"a Box action space must be 1-D (one axis of action dimensions), got {action_space}")
        low, high = np.asarray(action_space.low, np.float64), np.asarray(action_space.high, np.float64)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise TypeError(f"a Box action space needs finite bounds to rescale actions to, got {action_space}")
        bounds = BoxBounds(tuple(low.tolist()), tuple(high.tolist()))
        if box not in BOX_KINDS:
            raise ValueError(f"box={box!r}; expected one of {BOX_KINDS}")
        if box == "gaussian":
            return Gaussian(bounds, state_dependent_std)
        return SquashedGaussian(bounds) if box == "squashed" else Deterministic(bounds)
    raise TypeError(
        f"no action distribution for {action_space}; supported: Discrete, MultiDiscrete, Box (1-D, finite bounds)"
    )
