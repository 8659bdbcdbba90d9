"""Population-based training of a device-mode run's members (Jaderberg et al., 2017,
"Population Based Training of Neural Networks").

Every ``pbt_interval`` iterations the members are ranked by the mean return of the episodes
they ended since the last PBT step. Each member of the bottom ``pbt_quantile`` copies a member
of the top ``pbt_quantile``, drawn uniformly (exploit: its parameters, optimizer state and
observation statistics; its own environments, replay and RNG stay), and perturbs the fields
``pbt`` names (explore: each times 0.8 or 1.2, or with ``pbt_resample_prob`` drawn again from
the members' initial values). Those fields are per-member traced values of the compiled call
(``AnakinState.hyper``, and the optimizer's injected hyperparameters), so a change never
recompiles. The decisions are drawn on the host from a stream seeded by the run's seed and
the iteration, from values held in the state, so a resumed run makes the same ones.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.config.constants import PBT_SEED_OFFSET
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import replace_config, resolve
from jaxflow.ondevice.members import Member, hyper_names

Array = jax.Array

PERTURB_FACTORS = (0.8, 1.2)
"""Explore's factors, each drawn with probability 1/2 (the paper's)."""

NEVER = -1
"""``parent`` and ``copied_at`` of a member that has not copied another."""


class PBTState(NamedTuple):
    """Each member's PBT record (with a leading members axis in ``AnakinState.pbt``)."""

    return_sum: Array
    """Summed returns of the episodes it ended since the last PBT step (float32)."""
    episodes: Array
    """How many episodes that is (float32)."""
    score: Array
    """Its mean return at the last PBT step where it had ended episodes (NaN before any)."""
    parent: Array
    """The member whose state it last copied (int32; ``NEVER``)."""
    copied_at: Array
    """The iteration of that copy (int32; ``NEVER``)."""


def init_state(num_members: int) -> PBTState:
    """The records of ``num_members`` members that have copied nobody."""
    zeros = jnp.zeros(num_members, jnp.float32)
    never = jnp.full(num_members, NEVER, jnp.int32)
    return PBTState(zeros, zeros, jnp.full(num_members, jnp.nan, jnp.float32), never, never)


def record(pbt: PBTState | None, returns: Array) -> PBTState | None:
    """One member's record with the episodes of one rollout added (``returns`` is NaN where
    no episode ended); None (no PBT) stays None."""
    if pbt is None:
        return None
    ended = ~jnp.isnan(returns)
    return pbt._replace(
        return_sum=pbt.return_sum + jnp.sum(jnp.where(ended, returns, 0.0)),
        episodes=pbt.episodes + jnp.sum(ended, dtype=jnp.float32),
    )


def recent_scores(pbt: Any) -> np.ndarray:
    """Each member's mean return since the last PBT step, or its last score where it ended none."""
    episodes = np.asarray(pbt.episodes)
    return np.where(episodes > 0, np.asarray(pbt.return_sum) / np.maximum(episodes, 1), np.asarray(pbt.score))


def best_member(pbt: Any) -> int:
    """The member of highest :func:`recent_scores` (NaN lowest, a tie to the lower index).

    Example:
        >>> best_member(init_state(3)._replace(return_sum=jnp.array([3.0, 9.0, 9.0]), episodes=jnp.ones(3)))
        1
    """
    return int(truncation_selection(recent_scores(pbt), 0.0)[0][0])


def truncation_selection(scores: np.ndarray, quantile: float) -> tuple[np.ndarray, np.ndarray]:
    """``(top, bottom)``: the ``max(1, floor(n * quantile))`` members of highest score (best
    first) and of lowest (worst last). NaN ranks lowest; equal scores rank by index.

    Example:
        >>> top, bottom = truncation_selection(np.array([10.0, 50, 30, np.nan, 40, 20, 60, 0]), 0.25)
        >>> top.tolist(), bottom.tolist()
        ([6, 1], [7, 3])
    """
    n = len(scores)
    k = max(1, int(n * quantile))
    order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
    return order[:k], order[n - k :]


def explore(value: float, initial: Sequence[float], resample_prob: float, rng: np.random.Generator) -> float:
    """``value`` times 0.8 or 1.2, or with probability ``resample_prob`` one of ``initial``.

    Example:
        >>> explore(1.0, [5.0], 0.0, np.random.default_rng(0)) in (0.8, 1.2)
        True
    """
    if rng.random() < resample_prob:
        return float(initial[int(rng.integers(len(initial)))])
    return value * PERTURB_FACTORS[int(rng.integers(len(PERTURB_FACTORS)))]


def exploit(
    state: Any, source: Array, hyper: Mapping[str, Array], scores: Array, iteration: Array, optimizer: Mapping[str, str]
) -> Any:
    """``state`` where member ``i`` holds member ``source[i]``'s train state (its own RNG kept)
    and observation statistics, and every member the values ``hyper`` (in ``state.hyper`` and,
    for the fields ``optimizer`` maps to the optimizer's names, in its injected hyperparameters);
    the records start a new interval."""
    take = functools.partial(jax.tree.map, lambda x: x[source])
    train = take(state.train)._replace(rng=state.train.rng)
    injected = dict(train.opt_state.hyperparams, **{leaf: hyper[k] for k, leaf in optimizer.items()})
    train = train._replace(opt_state=train.opt_state._replace(hyperparams=injected))
    copied = source != jnp.arange(source.shape[0])
    zeros = jnp.zeros_like(scores)
    pbt = PBTState(
        zeros,
        zeros,
        scores,
        jnp.where(copied, source, state.pbt.parent),
        jnp.where(copied, iteration, state.pbt.copied_at),
    )
    envs = state.envs._replace(normalizer=take(state.envs.normalizer))
    return state._replace(train=train, envs=envs, hyper=dict(state.hyper, **hyper), pbt=pbt)


class PopulationBasedTraining:
    """A device-mode run's PBT steps: decided on the host, copied on the device by one
    compiled function (compiled once: the choices are its arguments).

    Example:
        >>> pbt = PopulationBasedTraining(config, program.members, program._shardings)  # doctest: +SKIP
        >>> state = pbt.step(state)   # after each compiled call                        # doctest: +SKIP
    """

    def __init__(self, config: Any, members: Sequence[Member], shardings: Any):
        cls, device = type(config), config.device
        self.config, self.num_members = config, len(members)
        wanted = {resolve(cls, f) for f in device.pbt}
        self.fields = [k for k in hyper_names(config) if resolve(cls, k) in wanted]
        """The perturbed fields, named as ``AnakinState.hyper`` names them."""
        self.initial = {k: sorted({m.hyper[k] for m in members}) for k in self.fields}
        optimizer = {k: resolve(cls, k)[1] for k in self.fields if resolve(cls, k)[0] == "optimizer"}
        self._exploit = jax.jit(
            functools.partial(exploit, optimizer=optimizer), donate_argnums=0, out_shardings=shardings
        )

    def due(self, iteration: int) -> bool:
        """Whether the call that ended at ``iteration`` reached a multiple of ``pbt_interval``."""
        interval = self.config.device.pbt_interval
        return iteration // interval > (iteration - self.config.device.iterations_per_call) // interval

    def step(self, state: Any) -> Any:
        """``state`` after a PBT step where one is due, else ``state`` itself."""
        iteration = int(np.asarray(jax.device_get(state.iteration))[0])
        return self.apply(state, iteration) if self.due(iteration) else state

    def apply(self, state: Any, iteration: int) -> Any:
        """``state`` after the PBT step of ``iteration``: ranked, copied and perturbed."""
        pbt, hyper = jax.device_get((state.pbt, state.hyper))
        scores = recent_scores(pbt)
        source, values = self.decide(scores, {k: np.asarray(hyper[k]) for k in self.fields}, iteration)
        return self._exploit(
            state,
            jnp.asarray(source, jnp.int32),
            {k: jnp.asarray(v, jnp.float32) for k, v in values.items()},
            jnp.asarray(scores, jnp.float32),
            jnp.int32(iteration),
        )

    def decide(
        self, scores: np.ndarray, hyper: Mapping[str, np.ndarray], iteration: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(source, values)``: whom each member copies (itself where it keeps its state) and
        every member's values of the perturbed fields after the step."""
        rng = np.random.default_rng((self.config.seed + PBT_SEED_OFFSET, iteration))
        top, bottom = truncation_selection(scores, self.config.device.pbt_quantile)
        source = np.arange(self.num_members)
        values = {k: np.asarray(v, np.float64).copy() for k, v in hyper.items()}
        for j in bottom:
            source[j] = top[rng.integers(len(top))]
            for k in self.fields:
                parent = float(hyper[k][source[j]])
                value = explore(parent, self.initial[k], self.config.device.pbt_resample_prob, rng)
                values[k][j] = value if self._valid(k, value) else parent
        return source, values

    def _valid(self, field: str, value: float) -> bool:
        """Whether ``field`` may hold ``value`` (a perturbed discount may not pass 1)."""
        try:
            replace_config(self.config, **{field: value})
        except ConfigError:
            return False
        return True

    def checkpoint_meta(self, state: Any) -> dict[str, Any]:
        """What a checkpoint's ``meta.json`` records of the population under ``pbt``: the best
        member (:func:`best_member`, what ``jaxflow evaluate`` and ``export`` play by default)
        and each member's recent return (null before it ended an episode)."""
        pbt = jax.device_get(state.pbt)
        returns = [float(r) if np.isfinite(r) else None for r in recent_scores(pbt)]
        return {"pbt": {"best_member": best_member(pbt), "member_returns": returns}}

    def report(self, state: Any) -> dict[str, float]:
        """The lineage for the results: each member's perturbed values, parent, iteration of
        its copy and recent return, and the best member by that return."""
        pbt, hyper = jax.device_get((state.pbt, state.hyper))
        recent = recent_scores(pbt)
        out: dict[str, float] = {"best_member": best_member(pbt)}
        for i in range(self.num_members):
            out.update({f"member_{i}/{k}": float(hyper[k][i]) for k in self.fields})
            out[f"member_{i}/parent"] = int(pbt.parent[i])
            out[f"member_{i}/copied_at"] = int(pbt.copied_at[i])
            out[f"member_{i}/recent_return"] = float(recent[i])
        return out
