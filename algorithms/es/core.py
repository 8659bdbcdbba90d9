"""The pure math of ES and ARS: the shared noise table, perturbations named by their offset
into it, centered ranks, and the two search-gradient estimates.

A perturbation ``epsilon_i`` is ``table[offset_i : offset_i + dim]`` of one table of standard
normal floats that every worker holds (Salimans et al., 2017, "Evolution Strategies as a
Scalable Alternative to Reinforcement Learning", Section 2.1): workers exchange offsets and
returns, never parameter vectors. Member ``i`` of a generation plays ``theta + sigma eps_i``
and its antithetic twin ``theta - sigma eps_i`` (mirrored sampling).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn

Array = jax.Array

NOISE_SEED = 123
"""The seed of the noise table (Salimans et al.'s own): every process builds or receives the same table."""

RETURN_STD_FLOOR = 1e-8
"""Where every kept return is equal (all episodes ended alike) the step is 0, not a division by 0."""


def noise_table(size: int, seed: int = NOISE_SEED) -> np.ndarray:
    """``size`` standard normal float32 numbers, the same for the same ``seed`` on every machine.

    Example:
        >>> bool((noise_table(8) == noise_table(8)).all())
        True
    """
    return np.random.default_rng(seed).standard_normal(size, dtype=np.float32)


def sample_offsets(key: Array, num_pairs: int, table_size: int, dim: int) -> Array:
    """``num_pairs`` offsets into a table of ``table_size`` floats, each leaving room for ``dim`` of them."""
    return jax.random.randint(key, (num_pairs,), 0, table_size - dim + 1)


def perturbations(table: Array, offsets: Array, dim: int) -> Array:
    """``[n, dim]``: the slices of ``table`` the ``offsets`` name (in JAX, on any device)."""
    return jax.vmap(lambda o: jax.lax.dynamic_slice(table, (o,), (dim,)))(offsets)


def host_perturbations(table: np.ndarray, offsets: np.ndarray, dim: int) -> np.ndarray:
    """:func:`perturbations` in numpy, reading a worker's (shared, read-only) table."""
    return np.stack([table[o : o + dim] for o in np.asarray(offsets, np.int64)])


def centered_ranks(x: Array) -> Array:
    """The ranks of all of ``x``'s entries scaled to ``[-0.5, 0.5]`` (ties share their mean
    rank), through evosax's ``centered_rank_fitness_shaping_fn`` (Salimans et al.'s fitness
    shaping, Section 2.1 and their ``compute_centered_ranks``).

    Example:
        >>> np.asarray(centered_ranks(jnp.array([[3.0, 1.0], [2.0, 7.0]])), np.float64).round(4).tolist()
        [[0.1667, -0.5], [-0.1667, 0.5]]
    """
    flat = x.reshape(-1)
    return centered_rank_fitness_shaping_fn(None, flat, None, None).reshape(x.shape)


def antithetic_gradient(returns_pos: Array, returns_neg: Array, noise: Array, sigma: float) -> Array:
    """ES's search gradient of the expected return at ``theta`` (Salimans et al., Algorithm 2
    with mirrored sampling): ``1 / (2 n sigma) sum_i (F(r+_i) - F(r-_i)) eps_i``, ``F`` the
    centered ranks of all ``2n`` returns; ``n`` pairs, ``noise [n, dim]``."""
    n = noise.shape[0]
    chex.assert_shape([returns_pos, returns_neg], (n,))
    ranks = centered_ranks(jnp.stack([returns_pos, returns_neg]))
    return (ranks[0] - ranks[1]) @ noise / (2 * n * sigma)


def top_directions_gradient(returns_pos: Array, returns_neg: Array, noise: Array, top: int) -> Array:
    """ARS's step direction (Mania et al., 2018, "Simple random search provides a competitive
    approach to reinforcement learning", Algorithm 2, V1-t/V2-t): of the ``n`` directions keep
    the ``top`` with the largest ``max(r+, r-)``, and return
    ``1 / (top sigma_R) sum_k (r+_k - r-_k) delta_k``, ``sigma_R`` the standard deviation of
    the ``2 top`` returns kept."""
    n = noise.shape[0]
    chex.assert_shape([returns_pos, returns_neg], (n,))
    _, keep = jax.lax.top_k(jnp.maximum(returns_pos, returns_neg), top)
    kept = jnp.concatenate([returns_pos[keep], returns_neg[keep]])
    sigma_r = jnp.maximum(kept.std(), RETURN_STD_FLOOR)
    return (returns_pos[keep] - returns_neg[keep]) @ noise[keep] / (top * sigma_r)
