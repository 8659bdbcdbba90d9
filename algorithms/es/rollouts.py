"""One episode per member of a population, each member a flat parameter vector: in JAX on
the device (the population a ``vmap`` axis of one compiled call), or on the host in a Ray
worker (:class:`SearchWorker`, which holds the shared noise table and answers offsets with
returns). Both count the observations they acted on, for ARS's state normalization."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import ray
from jax.flatten_util import ravel_pytree

from jaxflow import envs
from jaxflow.algorithms.es.core import host_perturbations
from jaxflow.dataflow import placement
from jaxflow.policies.policy import Policy
from jaxflow.rollout.normalize import Moments, moments_merge, moments_of, normalize_observations

Array = jax.Array
Act = Callable[[Array, Array], Array]
"""``act(flat_params, observations [B, *obs]) -> env actions [B, ...]``."""


def greedy_actor(policy: Policy, unravel: Callable[[Array], Any]) -> Act:
    """The greedy policy of a flat parameter vector, as the env takes its actions."""
    return lambda flat, obs: policy.distribution.to_env(policy.greedy(unravel(flat), obs))


class Episode(NamedTuple):
    """A device episode in progress, and what it has counted."""

    obs: Array
    state: Any
    done: Array
    ret: Array
    length: Array
    key: Array
    obs_sum: Array
    obs_sq: Array


def device_episode(
    env: Any,
    env_params: Any,
    act: Act,
    clip: float,
    flat: Array,
    norm: Moments | None,
    key: Array,
    max_length: int,
) -> Episode:
    """One gymnax episode of the policy ``flat`` (observations normalized by ``norm`` unless
    None), stepped until the env says done (its time limit included) or ``max_length`` steps;
    under ``vmap`` the loop runs until every member is done, finished members left as they were."""
    key, reset_key = jax.random.split(key)
    obs, state = env.reset(reset_key, env_params)
    zero_obs = jnp.zeros_like(obs, jnp.float32)

    def body(e: Episode) -> Episode:
        x = e.obs[None] if norm is None else normalize_observations(norm, e.obs[None].astype(jnp.float32), clip)
        key, step_key = jax.random.split(e.key)
        obs, state, reward, terminated, truncated, _ = env.step(step_key, e.state, act(flat, x)[0], env_params)
        o, done = e.obs.astype(jnp.float32), jnp.asarray(terminated | truncated, bool)
        return Episode(
            obs,
            state,
            done,
            e.ret + jnp.asarray(reward, jnp.float32),
            e.length + 1,
            key,
            e.obs_sum + o,
            e.obs_sq + o * o,
        )

    start = Episode(obs, state, jnp.zeros((), bool), jnp.zeros(()), jnp.zeros((), jnp.int32), key, zero_obs, zero_obs)
    return jax.lax.while_loop(lambda e: ~e.done & (e.length < max_length), body, start)


def population_returns(
    env: Any,
    env_params: Any,
    act: Act,
    clip: float,
    thetas: Array,
    norm: Moments | None,
    key: Array,
    max_length: int,
) -> tuple[Array, Array, Moments]:
    """Every member's return and length (``thetas [m, dim]``, episodes of at most
    ``max_length`` steps), and the moments of all the observations they acted on."""
    keys = jax.random.split(key, thetas.shape[0])
    episode = functools.partial(device_episode, env, env_params, act, clip, norm=norm, max_length=max_length)
    ep = jax.vmap(lambda flat, k: episode(flat=flat, key=k))(thetas, keys)
    count = ep.length.sum().astype(jnp.float32)
    mean = ep.obs_sum.sum(0) / jnp.maximum(count, 1.0)
    m2 = jnp.maximum(ep.obs_sq.sum(0) - count * mean**2, 0.0)  # float32 round-off may dip below 0
    return ep.ret, ep.length, Moments(count, mean, m2)


class SearchSpec(NamedTuple):
    """What a :class:`SearchWorker` is built from (the ``spec`` of its
    :class:`~jaxflow.rollout.worker_set.WorkerSet`)."""

    config: Any
    policy: Policy
    table: Any
    """The noise table, or in a Ray run its reference in the object store (one copy per node)."""


def member_seeds(seed: int, generation: int, first: int, pairs: int) -> np.ndarray:
    """The env seeds of the ``+`` members of pairs ``first .. first + pairs - 1`` of a
    generation's population, then of their ``-`` members: from the pairs' places in the
    population, so a share's episodes are the same whichever worker plays them.

    Example:
        >>> a = member_seeds(0, 3, 0, 4)
        >>> b = member_seeds(0, 3, 2, 2)  # pairs 2 and 3 alone
        >>> bool((a.reshape(2, 4)[:, 2:] == b.reshape(2, 2)).all())
        True
    """
    both = [np.random.SeedSequence([seed, generation, first + j]).generate_state(2) for j in range(pairs)]
    return np.asarray(both, np.uint32).T.reshape(-1)


class SearchWorker:
    """A Ray actor that plays perturbations of ``theta`` named by noise-table offsets: the
    table arrives once (a reference to the object store's one copy per node), each
    generation only ``theta`` (:meth:`set_weights`), the offsets and the observation statistics.
    Built and restarted by a :class:`~jaxflow.rollout.worker_set.WorkerSet`, as rollout workers are.

    Example:
        >>> spec = SearchSpec(config, policy, ray.put(table))                    # doctest: +SKIP
        >>> w = jax_actor(SearchWorker).remote(spec, 0)                           # doctest: +SKIP
        >>> w.set_weights.remote(theta, 0)                                        # doctest: +SKIP
        >>> ray.get(w.evaluate.remote(np.array([5, 17]), 0, 0, None))["returns_pos"]  # doctest: +SKIP
    """

    def __init__(self, spec: SearchSpec, index: int, incarnation: int = 0, env_entry: Any = None):
        if env_entry is not None:  # an id registered in the driver only
            envs.adopt(env_entry)
        self.config, self.index, self.incarnation = spec.config, index, incarnation
        self.table = ray.get(spec.table) if isinstance(spec.table, ray.ObjectRef) else spec.table
        flat, unravel = ravel_pytree(spec.policy.init(jax.random.PRNGKey(0)))
        self.dim = flat.size
        self._act = jax.jit(jax.vmap(lambda f, o: greedy_actor(spec.policy, unravel)(f, o[None])[0]))
        self._envs: list[Any] = []
        self._theta, self._generation = np.zeros(0, np.float32), -1

    def ping(self) -> int:
        return self.index

    def node_id(self) -> str:
        """The Ray node this worker runs on."""
        return placement.node_id()

    def set_weights(self, theta: np.ndarray, generation: int) -> None:
        """The search distribution's mean of generation ``generation``."""
        self._theta, self._generation = np.asarray(theta), generation

    def noise(self, offsets: np.ndarray) -> np.ndarray:
        """The perturbations ``offsets`` name, read from this worker's table."""
        return host_perturbations(self.table, offsets, self.dim)

    def evaluate(self, offsets: np.ndarray, first: int, generation: int, norm: Moments | None) -> dict[str, Any]:
        """``theta + sigma eps_i`` and ``theta - sigma eps_i`` for each offset, pairs ``first``
        onwards of generation ``generation``'s population: one episode each; ``seconds`` is the
        time this took here (the workers' raw rate, apart from the driver's)."""
        if generation != self._generation:  # set_weights comes first, by the same caller
            raise ValueError(
                f"SearchWorker {self.index} holds theta of generation {self._generation}, not {generation}"
            )
        start = time.perf_counter()
        eps = self.noise(offsets) * self.config.noise_std
        thetas = np.concatenate([self._theta + eps, self._theta - eps])
        seeds = member_seeds(self.config.seed, generation, first, len(offsets))
        returns, lengths, moments = self._episodes(thetas, seeds, norm)
        n = len(offsets)
        return {
            "offsets": np.asarray(offsets),
            "returns_pos": returns[:n],
            "returns_neg": returns[n:],
            "lengths": lengths,
            "moments": moments,
            "seconds": time.perf_counter() - start,
        }

    def _episodes(
        self, thetas: np.ndarray, seeds: np.ndarray, norm: Moments | None
    ) -> tuple[np.ndarray, np.ndarray, Moments]:
        m, clip = len(thetas), self.config.rollout.normalize_clip
        while len(self._envs) < m:  # the context lets a test env misbehave in one worker only
            context = envs.EnvContext(self.index, len(self._envs), self.incarnation)
            self._envs.append(envs.make_cpu(self.config.env, context, **self.config.env_config))
        params = jax.device_put(thetas.astype(np.float32))  # on the device once, not every step
        obs = np.stack([np.asarray(e.reset(seed=int(s))[0], np.float32) for e, s in zip(self._envs, seeds)])
        alive, returns, lengths, seen = np.ones(m, bool), np.zeros(m), np.zeros(m, np.int64), []
        max_length = self.config.max_episode_length
        while alive.any():
            seen.append(obs[alive].astype(np.float64))
            x = obs if norm is None else normalize_observations(norm, obs, clip)
            actions = np.asarray(self._act(params, x))
            for i in np.flatnonzero(alive):
                o, r, terminated, truncated, _ = self._envs[i].step(
                    actions[i].item() if actions[i].ndim == 0 else actions[i]
                )
                obs[i], returns[i], lengths[i] = o, returns[i] + float(r), lengths[i] + 1
                alive[i] = not (terminated or truncated) and lengths[i] < max_length
        return returns, lengths, moments_of(np.concatenate(seen))


def merge_all(moments: list[Moments]) -> Moments:
    """The moments of every worker's observations together."""
    out = moments[0]
    for m in moments[1:]:
        out = moments_merge(out, m)
    return out
