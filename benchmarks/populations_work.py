"""Equal work for ``populations.py``: jaxflow's device-mode ES and evosax's Open_ES loop timed
one generation at a time from the same policy parameters, so both step the same episodes.

A vmapped episode loop steps every member until the longest episode ends, so a generation
costs about ``population x longest episode`` member-steps whatever the members' own lengths;
the learning runs' rates compare runs that learned differently. Here both runners start every
timed generation from the same state (``theta``, a fresh optimizer, a fixed key), twice:

- ``full``: ``theta`` a policy that reached the target (the longest episode is CartPole's 500);
- ``short``: the initial ``theta`` with episodes cut at ``--short-length`` steps, so the
  per-generation costs around the rollout (sampling, ranks, Adam, the host round trip of the
  metrics, the Python of ``train()``) weigh more.

The runners take turns generation by generation (the order reversed every repeat) and the
medians of wall and CPU seconds (this process's, every thread: XLA runs on the host here) are
reported with the longest episode each played (its max return: CartPole pays 1 a step);
the ratios are evosax's seconds over the runner's (above 1: faster than evosax).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from common import median_of_measured, ratio

from jaxflow import Algorithm, envs
from jaxflow.algorithms.es import ESConfig, SearchNetwork, population_returns
from jaxflow.algorithms.es.rollouts import greedy_actor
from jaxflow.policies.distributions import Categorical
from jaxflow.policies.policy import Policy

WARMUP = 2
"""Untimed generations per runner before the timed ones (the first compiles)."""

Timed = Callable[[], dict[str, float]]


def evosax_generation(seed: int, population: int, max_length: int) -> tuple[Callable[..., Any], Any, Any]:
    """evosax's Open_ES with the benchmark's settings: ``(generation, state, unravel)``, where
    the jitted ``generation(state, key) -> (state, return mean, env steps, longest)`` is ask,
    the same vmapped gymnax episodes as device mode, and tell."""
    from evosax.algorithms import Open_ES

    config = ESConfig()
    env, env_params = envs.make("gymnax/CartPole-v1")
    policy = Policy(SearchNetwork(2, config.hidden_sizes), Categorical(2), (4,))
    flat, unravel = jax.flatten_util.ravel_pytree(policy.init(jax.random.PRNGKey(seed)))
    strategy = Open_ES(
        population,
        flat,
        optimizer=optax.adam(config.optimizer.lr),
        std_schedule=optax.constant_schedule(config.noise_std),
    )
    act = greedy_actor(policy, unravel)
    state = strategy.init(jax.random.PRNGKey(seed), flat, strategy.default_params)

    @jax.jit
    def generation(state: Any, key: jax.Array) -> tuple[Any, jax.Array, jax.Array, jax.Array]:
        k_ask, k_env, k_tell = jax.random.split(key, 3)
        members, state = strategy.ask(k_ask, state, strategy.default_params)
        returns, lengths, _ = population_returns(env, env_params, act, 0.0, members, None, k_env, max_length)
        state, _ = strategy.tell(k_tell, members, -returns, state, strategy.default_params)  # evosax minimises
        return state, returns.mean(), lengths.sum(), returns.max()

    # init's state differs in weak types from the one tell returns (best_solution, std): as it
    # is, the second generation would compile the whole loop again (device mode places its
    # state where its call leaves it for the same reason)
    after = jax.eval_shape(generation, state, jax.random.PRNGKey(0))[0]
    state = jax.tree.map(lambda x, a: jnp.asarray(x.item()) if a.weak_type else jnp.asarray(x, a.dtype), state, after)
    return generation, state, unravel


def clocked(call: Callable[[], tuple[float, float]]) -> dict[str, float]:
    """Wall and CPU seconds of ``call()`` (which returns its env steps and longest episode)."""
    c, w = time.process_time(), time.perf_counter()
    steps, longest = call()
    return {"wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c, "steps": steps, "longest": longest}


def device_runner(seed: int, population: int, theta: np.ndarray | None, max_length: int) -> tuple[Timed, np.ndarray]:
    """One ``algo.train()`` of device-mode ES (``iterations_per_call=1``) from the same state
    each call; also the ``theta`` it starts from."""
    algo = Algorithm.build(
        "ES", env="gymnax/CartPole-v1", mode="device", seed=seed, population_size=population,
        l2_coeff=0.0, iterations_per_call=1, max_episode_length=max_length,
    )  # fmt: skip
    program = algo.program
    start = program.get_state()
    if theta is not None:
        start = start._replace(theta=np.asarray(theta, np.float32))

    def generation() -> tuple[float, float]:
        before = algo.context.counters["env_steps_sampled"]
        r = algo.train()
        return r["env_steps_sampled"] - before, r["population"]["return_max"]

    def timed() -> dict[str, float]:
        program.set_state(start)  # untimed: the same generation every call
        return clocked(generation)

    return timed, np.asarray(start.theta)


def evosax_runner(seed: int, population: int, theta: np.ndarray, max_length: int) -> Timed:
    """One evosax generation (and its metrics pulled to the host) from the same state each call."""
    generation, state, _ = evosax_generation(seed, population, max_length)
    start = state.replace(mean=jnp.asarray(theta))
    key = jax.random.PRNGKey(seed + 1)

    def call() -> tuple[float, float]:
        _, mean, steps, longest = generation(start, key)
        float(mean)
        return int(steps), float(longest)

    return lambda: clocked(call)


def equal_work(
    seed: int, population: int, theta: np.ndarray | None, max_length: int, repeats: int
) -> dict[str, dict[str, Any]]:
    """Medians per runner of ``repeats`` generations from ``theta`` (None: the initial one)
    with episodes of at most ``max_length`` steps, the runners taking turns."""
    device, start = device_runner(seed, population, theta, max_length)
    runners = {"device": device, "evosax": evosax_runner(seed, population, start, max_length)}
    for run in runners.values():
        for _ in range(WARMUP):
            run()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in runners}
    for i in range(repeats):
        for name in list(runners)[:: 1 if i % 2 == 0 else -1]:
            samples[name].append(runners[name]())
    out = {}
    for name, rows in samples.items():
        med = {k: median_of_measured([r[k] for r in rows]) for k in rows[0]}
        med["member_steps_per_s"] = population * med["longest"] / med["wall_s"]
        out[name] = med
    for m in out.values():
        m["speed_vs_evosax"] = ratio(out["evosax"]["wall_s"], m["wall_s"])
        m["cpu_speed_vs_evosax"] = ratio(out["evosax"]["cpu_s"], m["cpu_s"])
    return out


def equal_work_table(work: dict[str, dict[str, dict[str, Any]]], population: int, repeats: int) -> str:
    lines = [
        f"## Equal work: one generation from the same theta, medians of {repeats} alternated repeats",
        "",
        "| case | run | ms/gen | speed vs evosax | CPU ms/gen | CPU speed vs evosax | longest episode | env steps/gen "
        f"| member-steps/s ({population} x longest / s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, runs in work.items():
        for name, m in runs.items():
            lines.append(
                f"| {case} | {name} | {m['wall_s'] * 1e3:.1f} | {m['speed_vs_evosax']:.2f} | {m['cpu_s'] * 1e3:.1f} "
                f"| {m['cpu_speed_vs_evosax']:.2f} | {m['longest']:.0f} | {m['steps']:,.0f} | {m['member_steps_per_s']:,.0f} |"
            )
    return "\n".join(lines) + "\n"
