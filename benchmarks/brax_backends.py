"""Env steps/s of a Brax environment on each of brax's physics pipelines, as device mode steps it.

For each backend: ``--envs`` copies of ``brax/<name>`` (:class:`jaxflow.envs.BraxEnv`)
stepped ``--steps`` times with uniformly random actions in one jitted ``lax.scan`` of
``vmap``-ed gymnax steps, automatic resets included, which is what device mode's rollout
does; then the same scan of brax's own ``env.step`` without resets, to show their cost.
Each scan is compiled and run once untimed, then timed ``--reps`` times (median). Prints a
Markdown table and writes ``benchmarks/results/brax_backends.json`` and ``.md``.

    .venv/bin/python benchmarks/brax_backends.py                         # inverted_pendulum, 256 envs x 100 steps
    .venv/bin/python benchmarks/brax_backends.py --env halfcheetah --backends spring generalized
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import logger, machine_info, write_report

from jaxflow.envs.brax_envs import BACKENDS, make_brax

log = logger("brax_backends")


def adapter_scan(env: Any, params: Any, num_envs: int, num_steps: int) -> Callable[[jax.Array], jax.Array]:
    """``num_steps`` auto-resetting gymnax steps of ``num_envs`` copies; returns the sum of
    rewards and observations (the observations keep XLA from dropping the physics where the
    reward is a constant, as inverted_pendulum's alive bonus is)."""
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def run(key: jax.Array) -> jax.Array:
        key, k_reset = jax.random.split(key)
        _, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)

        def body(state: Any, k: jax.Array) -> tuple[Any, jax.Array]:
            k_act, k_env = jax.random.split(k)
            actions = jax.random.uniform(k_act, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
            obs, state, reward, *_ = step(jax.random.split(k_env, num_envs), state, actions, params)
            return state, reward.sum() + obs.sum()

        return jax.lax.scan(body, state, jax.random.split(key, num_steps))[1].sum()

    return jax.jit(run)


def brax_scan(env: Any, num_envs: int, num_steps: int) -> Callable[[jax.Array], jax.Array]:
    """The same scan over brax's own ``step``, without resets."""
    brax_env = env.brax_env

    def run(key: jax.Array) -> jax.Array:
        key, k_reset = jax.random.split(key)
        state = jax.vmap(brax_env.reset)(jax.random.split(k_reset, num_envs))

        def body(state: Any, k: jax.Array) -> tuple[Any, jax.Array]:
            actions = jax.random.uniform(k, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
            state = jax.vmap(brax_env.step)(state, actions)
            return state, state.reward.sum() + state.obs.sum()

        return jax.lax.scan(body, state, jax.random.split(key, num_steps))[1].sum()

    return jax.jit(run)


def measure(run: Callable[[jax.Array], jax.Array], steps: int, reps: int) -> dict[str, float]:
    """The first (compiling) call's wall and CPU seconds; the median env steps per wall
    second and per CPU second of ``reps`` more. CPU seconds count this process's work on
    every core, so on a machine shared with other jobs they say more than the wall clock."""
    t0, c0 = time.perf_counter(), time.process_time()
    run(jax.random.PRNGKey(0)).block_until_ready()
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    rates, cpu_rates = [], []
    for r in range(reps):
        t, c = time.perf_counter(), time.process_time()
        run(jax.random.PRNGKey(r + 1)).block_until_ready()
        rates.append(steps / (time.perf_counter() - t))
        cpu_rates.append(steps / (time.process_time() - c))
    return {
        "first_call_s": first,
        "first_call_cpu_s": first_cpu,
        "env_steps_per_s": statistics.median(rates),
        "env_steps_per_cpu_s": statistics.median(cpu_rates),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="inverted_pendulum", help="a name in brax's registry")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--envs", type=int, default=256, help="environments stepped together (vmap)")
    parser.add_argument("--steps", type=int, default=100, help="steps of each in one scan")
    parser.add_argument("--reps", type=int, default=3, help="timed calls after the compiling one")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args()
    machine = machine_info(runtime=False)
    rows = []
    for backend in args.backends:
        env, params = make_brax(f"brax/{args.env}", backend=backend)
        log(f"{backend}: adapter (auto-reset)")
        ours = measure(adapter_scan(env, params, args.envs, args.steps), args.envs * args.steps, args.reps)
        log(f"{backend}: brax's step alone")
        raw = measure(brax_scan(env, args.envs, args.steps), args.envs * args.steps, args.reps)
        rows.append({"backend": backend, "adapter": ours, "brax_step": raw})
    title = f"brax/{args.env}: {args.envs} envs x {args.steps} steps per jitted scan, random actions"
    lines = [
        f"# {title}",
        "",
        f"load average at start: {machine['load_average_at_start'][0]:.1f} on {machine['cpu_count']} cores",
        "",
        "| backend | env steps/s (auto-reset, as device mode) | per CPU s | first call s (CPU s) "
        "| env steps/s (brax's step alone) | per CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['backend']} | {r['adapter']['env_steps_per_s']:,.0f} | {r['adapter']['env_steps_per_cpu_s']:,.0f} "
        f"| {r['adapter']['first_call_s']:.1f} ({r['adapter']['first_call_cpu_s']:.1f}) "
        f"| {r['brax_step']['env_steps_per_s']:,.0f} | {r['brax_step']['env_steps_per_cpu_s']:,.0f} |"
        for r in rows
    ]
    text = "\n".join(lines)
    machine.update(jax=jax.__version__, jax_backend=jax.default_backend())
    report = {"title": title, "args": vars(args), "machine": machine, "rows": rows}
    write_report(args.out, "brax_backends", report, text)


if __name__ == "__main__":
    main()
