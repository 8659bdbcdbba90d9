"""The settings of ES (Salimans et al., 2017) and ARS (Mania et al., 2018): the population,
the perturbations' scale and noise table, and how a generation's returns move the parameters."""

from __future__ import annotations

import dataclasses

import jax
import optax

from jaxflow import CommonConfig
from jaxflow.algorithms.es.core import antithetic_gradient, top_directions_gradient
from jaxflow.config import OptimizerConfig, RolloutConfig
from jaxflow.config.fields import NON_NEGATIVE, POSITIVE, SIZE, param, require
from jaxflow.learn.sgd import make_optimizer

Array = jax.Array

DEFAULT_MAX_EPISODE_LENGTH = 1000
"""Steps an episode may last by default: gymnasium's and brax's usual longest time limit."""
MIN_NOISE_TABLE = 1000
"""The smallest noise table allowed: fewer floats than that would make every perturbation nearly the same."""


@dataclasses.dataclass(frozen=True)
class SearchConfig(CommonConfig):
    """What ES and ARS share (plus :class:`~jaxflow.config.CommonConfig`; of its rollout fields
    ``num_workers``, the workers' resources and placement, ``worker_timeout_s``,
    ``on_worker_failure``, ``normalize_observations`` and ``normalize_clip`` apply; ``gamma``
    and the device group's ``num_envs`` do not)."""

    population_size: int = param(256, SIZE)
    """Episodes per generation: ``population_size / 2`` perturbations, each played as
    ``theta + sigma eps`` and ``theta - sigma eps``. In device mode a multiple of twice the
    number of local devices, which each evaluate an equal share."""
    noise_std: float = param(0.02, POSITIVE)
    """sigma, the scale of the perturbations."""
    noise_table_size: int = param(10_000_000, SIZE)
    """Floats in the shared noise table (40 MB at the default); at least the parameter count."""
    max_episode_length: int = param(DEFAULT_MAX_EPISODE_LENGTH, SIZE)
    """Steps after which a member's episode is cut, its return so far counted (and the
    evaluation's episodes too): an env's own time limit ends episodes first where it is
    shorter (CartPole's 500); an env without one would otherwise never end a generation.
    Raise it for an env whose time limit is longer."""
    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=2))
    """Ray mode's workers: each evaluates ``population_size / num_workers`` members a generation."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        require(
            self.population_size % 2 == 0 and self.population_size >= 2,
            f"{name}.population_size must be even and at least 2 (perturbations come in +/- pairs), got {self.population_size}.",
        )
        require(
            self.noise_table_size >= MIN_NOISE_TABLE,
            f"{name}.noise_table_size must be at least {MIN_NOISE_TABLE}, got {self.noise_table_size}.",
        )
        require(
            self.device.num_seeds == 1 and not self.device.sweep and not self.device.pbt,
            f"{name}: the population is the perturbations of one agent; num_seeds, sweep and pbt are not supported.",
        )
        require(not self.rollout.scale_rewards, f"{name}: scale_rewards is not supported (the returns are ranked).")
        pairs, workers = self.population_size // 2, self.rollout.num_workers
        if self.mode == "ray":
            require(
                workers >= 1 and pairs % workers == 0,
                f"{name}: in Ray mode population_size / 2 ({pairs}) must be a multiple of num_workers ({workers}, at least 1).",
            )

    def search_direction(self, returns_pos: Array, returns_neg: Array, noise: Array, theta: Array) -> Array:
        """The direction the optimizer descends (minus the ascent direction on the return)."""
        raise NotImplementedError

    def search_optimizer(self) -> optax.GradientTransformation:
        """The optimizer of ``theta``."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class ESConfig(SearchConfig):
    """OpenAI's evolution strategies (Salimans et al., 2017): centered ranks, mirrored
    perturbations, Adam and L2 weight decay on the search gradient."""

    l2_coeff: float = param(0.005, NON_NEGATIVE)
    """Weight decay: ``l2_coeff * theta`` is added to the (descent) gradient, as in the paper."""
    hidden_sizes: tuple[int, ...] = (32, 32)
    """Widths of the policy MLP's tanh layers."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=0.03, max_grad_norm=1000.0))
    """Adam on the search gradient (clipping far above the gradients centered ranks give)."""

    def search_direction(self, returns_pos: Array, returns_neg: Array, noise: Array, theta: Array) -> Array:
        return self.l2_coeff * theta - antithetic_gradient(returns_pos, returns_neg, noise, self.noise_std)

    def search_optimizer(self) -> optax.GradientTransformation:
        return make_optimizer(self.optimizer.lr, self.optimizer.max_grad_norm)


@dataclasses.dataclass(frozen=True)
class ARSConfig(SearchConfig):
    """Augmented random search (Mania et al., 2018, V2-t): a linear policy on normalized
    states, the ``top_directions`` best of the perturbations, a plain step scaled by their
    returns' standard deviation."""

    population_size: int = param(32, SIZE)
    """Episodes per generation: ``2 N`` for ``N`` directions."""
    noise_std: float = param(0.03, POSITIVE)
    """nu, the scale of the perturbations."""
    top_directions: int = param(8, SIZE)
    """b, the directions of the largest ``max(r+, r-)`` that the step uses (at most ``population_size / 2``)."""
    hidden_sizes: tuple[int, ...] = ()
    """No hidden layers: a linear policy (a discrete action space: the argmax of a linear map)."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=0.02))
    """``lr`` is the step size alpha of plain gradient ascent (``max_grad_norm`` is not used)."""
    rollout: RolloutConfig = param(None, factory=lambda: RolloutConfig(num_workers=2, normalize_observations=True))
    """Observations are normalized by the running statistics of every state the perturbations
    visited (the paper's V2); ``normalize_observations=False`` is V1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.top_directions <= self.population_size // 2,
            f"ARSConfig.top_directions ({self.top_directions}) must be at most population_size / 2 "
            f"({self.population_size // 2}).",
        )

    def search_direction(self, returns_pos: Array, returns_neg: Array, noise: Array, theta: Array) -> Array:
        del theta
        return -top_directions_gradient(returns_pos, returns_neg, noise, self.top_directions)

    def search_optimizer(self) -> optax.GradientTransformation:
        return optax.sgd(self.optimizer.lr)
