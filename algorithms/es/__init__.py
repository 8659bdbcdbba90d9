"""ES and ARS: derivative-free policy search by perturbing the policy's parameters.

ES is OpenAI's evolution strategies (Salimans, Ho, Chen, Sidor & Sutskever, 2017, "Evolution
Strategies as a Scalable Alternative to Reinforcement Learning"): mirrored Gaussian
perturbations read from a shared noise table, centered ranks of the returns, Adam with weight
decay on the search gradient. ARS is augmented random search (Mania, Guy & Recht, 2018,
"Simple random search provides a competitive approach to reinforcement learning", V2-t): a
linear policy on normalized states, a step along the best ``top_directions`` perturbations
scaled by their returns' standard deviation.

Both share everything but the step: the noise table and offsets, the episodes of a
population (device mode: a ``vmap`` axis of one compiled call on gymnax envs; Ray mode:
:class:`SearchWorker` actors that hold the table and answer offsets with returns), the
program and its checkpoints. evosax (``evosax.algorithms.Open_ES`` and ``ARS``) draws fresh
noise with ``jax.random`` inside ``ask``, which cannot name a perturbation to a worker by an
offset, and its ARS has no state normalization: its centered-rank fitness shaping is what
:func:`centered_ranks` uses, and ``benchmarks/populations.py`` runs its ``Open_ES`` loop as
the baseline.

A folder of named parts: ``config``, ``core`` (the pure math), ``policy``, ``rollouts``
(episodes on the device and in the Ray workers), ``shares`` (a Ray-mode generation played by
the live workers, a failed worker's share played again), ``program``.
"""

from __future__ import annotations

from jaxflow import AlgorithmSpec, RunHooks, register_algorithm
from jaxflow.algorithms.es.config import ARSConfig, ESConfig, SearchConfig
from jaxflow.algorithms.es.core import (
    antithetic_gradient,
    centered_ranks,
    host_perturbations,
    noise_table,
    perturbations,
    sample_offsets,
    top_directions_gradient,
)
from jaxflow.algorithms.es.policy import SearchNetwork, search_policy
from jaxflow.algorithms.es.program import SearchProgram, SearchState, update
from jaxflow.algorithms.es.rollouts import SearchSpec, SearchWorker, device_episode, member_seeds, population_returns
from jaxflow.algorithms.es.shares import evaluate_shares

__all__ = [
    "ARS",
    "ES",
    "ARSConfig",
    "ESConfig",
    "SearchConfig",
    "SearchNetwork",
    "SearchProgram",
    "SearchSpec",
    "SearchState",
    "SearchWorker",
    "antithetic_gradient",
    "centered_ranks",
    "device_episode",
    "evaluate_shares",
    "host_perturbations",
    "member_seeds",
    "noise_table",
    "perturbations",
    "population_returns",
    "sample_offsets",
    "search_policy",
    "top_directions_gradient",
    "update",
]

# Ray mode's workers step gymnasium envs; device mode runs gymnax envs (resolve_search_mode).
_HOOKS = RunHooks(program=SearchProgram, program_kinds=("gymnasium", "gymnax"))
ES = register_algorithm(AlgorithmSpec("ES", ESConfig, None, None, policy=search_policy, run=_HOOKS))
ARS = register_algorithm(AlgorithmSpec("ARS", ARSConfig, None, None, policy=search_policy, run=_HOOKS))
