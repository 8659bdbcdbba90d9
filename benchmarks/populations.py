"""ES on CartPole: jaxflow's device mode (gymnax, the population a vmap axis) against the same
ES in Ray mode (gymnasium, 2 workers) and against evosax's own Open_ES loop, in one run.

Every run uses population 256, sigma 0.02, Adam at 0.03 (no weight decay), centered ranks and a (32, 32) tanh
MLP with a zero output layer, and trains until its population's mean return reaches
``--target`` or ``--max-generations``. evosax's loop is ``ask``, the same vmapped gymnax
episodes as device mode (``population_returns``), and ``tell``, jitted together. Reported,
medians over seeds: evaluations (episodes) and env steps per second after the first
(compiling) generation (an episode's cost grows with its length, so evaluations per second
fall as a run learns: compare runs by env steps per second too), seconds and generations to
the target (compiling included), and ratios against evosax measured in the same run; for Ray
mode also the workers' raw episode rate (the episodes over the slowest worker's own seconds
per generation) and the loop's share of it.

The runs learn differently, and a vmapped generation costs about its longest episode, so the
learning rates do not compare equal work: ``populations_work.py`` then times device mode and
evosax generation by generation from the same parameters (a policy that reached the target,
and the initial one with short episodes), medians of ``--work-repeats`` alternated repeats.

    .venv/bin/python benchmarks/populations.py             # 3 seeds
    .venv/bin/python benchmarks/populations.py --quick     # seed 0
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (
    argument_parser,
    fmt,
    logger,
    machine_info,
    median_of_measured,
    median_of_reached,
    ratio,
    save_figure,
    write_report,
)
from populations_work import equal_work, equal_work_table, evosax_generation

from jaxflow import Algorithm
from jaxflow.algorithms.es import ESConfig

log = logger("populations")
POPULATION = 256
NOISE_TABLE = 10_000_000
RUNS = ("device", "ray", "evosax")
Runner = tuple[Callable[[], dict[str, float]], Callable[[], None], Callable[[], np.ndarray]]
"""One generation per call (returning its metrics), stop, and the run's ``theta`` now."""


def jaxflow_step(mode: str, seed: int, workers: int) -> Runner:
    """One jaxflow generation per call (device mode: ``iterations_per_call=1``)."""
    env = "gymnax/CartPole-v1" if mode == "device" else "CartPole-v1"
    algo = Algorithm.build(
        "ES", env=env, mode=mode, seed=seed, population_size=POPULATION, noise_table_size=NOISE_TABLE, l2_coeff=0.0,
        iterations_per_call=1, num_workers=workers,
    )  # fmt: skip

    sampled = [0]

    def step() -> dict[str, float]:
        r = algo.train()
        steps, sampled[0] = r["env_steps_sampled"] - sampled[0], r["env_steps_sampled"]
        return {
            "return_mean": r["population"]["return_mean"],
            "worker_s": r["population"].get("worker_s", 0.0),
            "steps": steps,
        }

    return step, algo.stop, lambda: np.asarray(algo.program.get_state().theta)


def evosax_step(seed: int) -> Runner:
    """evosax's Open_ES with the same settings, one jitted ask-rollout-tell per call."""
    generation, state, _ = evosax_generation(seed, POPULATION, ESConfig().max_episode_length)
    box = {"state": state, "g": 0}

    def step() -> dict[str, float]:
        box["state"], mean, steps, _ = generation(
            box["state"], jax.random.fold_in(jax.random.PRNGKey(seed + 1), box["g"])
        )
        box["g"] += 1
        return {"return_mean": float(mean), "worker_s": 0.0, "steps": int(steps)}

    return step, lambda: None, lambda: np.asarray(box["state"].mean)


def timed(make: Callable[[], Runner], target: float, max_gen: int) -> dict[str, Any]:
    """Generations until the population's mean return reaches ``target`` (or ``max_gen``),
    timed; ``theta`` is the run's last (not saved in the report)."""
    step, stop, theta = make()
    try:
        t0 = time.perf_counter()
        out, worker_s, steps, hit = step(), 0.0, 0, None
        t1 = time.perf_counter()
        gens = 1
        hit = (t1 - t0, 1) if out["return_mean"] >= target else None
        while hit is None and gens < max_gen:
            out = step()
            gens += 1
            worker_s, steps = worker_s + out["worker_s"], steps + out["steps"]
            if out["return_mean"] >= target:
                hit = (time.perf_counter() - t0, gens)
        loop_s = time.perf_counter() - t1
        final = theta()
    finally:
        stop()
    after_first = (gens - 1) * POPULATION
    return {
        "first_generation_s": t1 - t0,
        "generations": gens,
        "evals_per_s": after_first / loop_s if gens > 1 else None,
        "env_steps_per_s": steps / loop_s if gens > 1 else None,
        "worker_evals_per_s": after_first / worker_s if worker_s else None,
        "seconds_to_target": hit[0] if hit else None,
        "generations_to_target": hit[1] if hit else None,
        "theta": final,
    }


def main() -> None:
    p = argument_parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--quick", action="store_true", help="seed 0 only")
    p.add_argument("--target", type=float, default=475.0)
    p.add_argument("--max-generations", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work-repeats", type=int, default=15, help="equal-work generations per runner and case")
    p.add_argument("--short-length", type=int, default=20, help="equal work, short case: episodes cut here")
    p.add_argument("--out-dir", default="results")
    args = p.parse_args()
    seeds = [0] if args.quick else args.seeds
    makers = {
        "device": lambda s: lambda: jaxflow_step("device", s, args.workers),
        "ray": lambda s: lambda: jaxflow_step("ray", s, args.workers),
        "evosax": lambda s: lambda: evosax_step(s),
    }
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in RUNS}
    for seed in seeds:
        for name in RUNS:  # in turns, so that a slower minute of the machine falls on all three
            runs[name].append(timed(makers[name](seed), args.target, args.max_generations))
            log(f"seed {seed} {name}: { {k: v for k, v in runs[name][-1].items() if k != 'theta'} }")
    work = {
        "full": equal_work(seeds[0], POPULATION, learned(runs), ESConfig().max_episode_length, args.work_repeats),
        "short": equal_work(seeds[0], POPULATION, None, args.short_length, args.work_repeats),
    }
    log(f"equal work: {work}")
    summary = summarize(runs)
    text = table(summary, args, seeds) + "\n" + equal_work_table(work, POPULATION, args.work_repeats)
    report = {"machine": machine_info(), "args": vars(args), "runs": runs, "summary": summary, "equal_work": work}
    write_report(args.out_dir, "populations", report, text)
    figure(summary, os.path.join(args.out_dir, "populations.png"))


def learned(runs: dict[str, list[dict[str, Any]]]) -> np.ndarray:
    """The ``theta`` of the first run (device mode's first) that reached the target, else
    device mode's last; every run's ``theta`` is taken out of ``runs`` (not reported)."""
    thetas = [(r.pop("theta"), r["seconds_to_target"] is not None) for name in RUNS for r in runs[name]]
    return next((t for t, hit in thetas if hit), thetas[0][0])


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    med = {
        name: {
            "evals_per_s": median_of_measured([r["evals_per_s"] for r in rs]),
            "env_steps_per_s": median_of_measured([r["env_steps_per_s"] for r in rs]),
            "worker_evals_per_s": median_of_measured([r["worker_evals_per_s"] for r in rs]),
            "seconds_to_target": median_of_reached([r["seconds_to_target"] for r in rs]),
            "generations_to_target": median_of_reached([r["generations_to_target"] for r in rs]),
            "first_generation_s": median_of_measured([r["first_generation_s"] for r in rs]),
        }
        for name, rs in runs.items()
    }
    base = med["evosax"]
    for m in med.values():
        m["evals_per_s_vs_evosax"] = ratio(m["evals_per_s"], base["evals_per_s"])
        m["env_steps_per_s_vs_evosax"] = ratio(m["env_steps_per_s"], base["env_steps_per_s"])
        m["time_to_target_vs_evosax"] = ratio(m["seconds_to_target"], base["seconds_to_target"])
    med["ray"]["share_of_worker_rate"] = ratio(med["ray"]["evals_per_s"], med["ray"]["worker_evals_per_s"])
    return med


def table(summary: dict[str, dict[str, Any]], args: Any, seeds: list[int]) -> str:
    lines = [
        f"# ES on CartPole, population {POPULATION}: medians over seeds {seeds}, target {args.target}",
        "",
        "| run | evals/s | vs evosax | env steps/s | vs evosax | s to target | vs evosax | generations "
        "| first gen s | worker evals/s | share |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in summary.items():
        lines.append(
            f"| {name} | {fmt(m['evals_per_s'], ',.0f')} | {fmt(m['evals_per_s_vs_evosax'], '.2f')} "
            f"| {fmt(m['env_steps_per_s'], ',.0f')} | {fmt(m['env_steps_per_s_vs_evosax'], '.2f')} "
            f"| {fmt(m['seconds_to_target'], '.1f')} | {fmt(m['time_to_target_vs_evosax'], '.2f')} "
            f"| {fmt(m['generations_to_target'], '.0f')} | {fmt(m['first_generation_s'], '.1f')} "
            f"| {fmt(m['worker_evals_per_s'], ',.0f')} | {fmt(m.get('share_of_worker_rate'), '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def figure(summary: dict[str, dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(summary)
    a.bar(names, [summary[n]["evals_per_s"] or 0.0 for n in names])
    a.set_ylabel("evaluations (episodes) / s")
    b.bar(names, [summary[n]["seconds_to_target"] or 0.0 for n in names])
    b.set_ylabel("seconds to target (0: missed)")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
