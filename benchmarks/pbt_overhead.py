"""Population-based training's overhead: the same device-mode members (PPO on gymnax
CartPole) with and without ``--pbt lr,ent_coef``, timed per iteration in one run.

Each run builds the members, trains ``--warmup`` iterations (compilation, and PBT's first
exploit steps compiled too), then times ``--iterations`` more; runs with and without PBT take
turns (``--repeats`` pairs), so a drift in the machine's load touches both alike. PBT steps
every ``--pbt-interval`` iterations; a run's figures are its mean wall and CPU seconds per
iteration (so the PBT steps count, spread over the iterations between them), and the overhead
is the median of those with PBT over the median without, minus one (the issue's aim: under 5%).

    .venv/bin/python benchmarks/pbt_overhead.py            # 8 members, 3 pairs of runs
    .venv/bin/python benchmarks/pbt_overhead.py --quick
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import argument_parser, fmt, logger, machine_info, save_figure, write_report

from jaxflow import Algorithm

log = logger("pbt_overhead")
RUNS = ("members", "pbt")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def seconds_per_iteration(pbt: bool, args: Any, seed: int) -> tuple[float, float]:
    """Mean wall and CPU seconds (this process, every thread) per timed iteration of one run
    (one iteration per compiled call); CPU seconds move less with other processes' load."""
    fields: dict[str, Any] = dict(
        mode="device", seed=seed, num_seeds=args.members, num_envs=args.num_envs, iterations_per_call=1
    )
    if pbt:
        fields.update({"device.pbt": ("lr", "ent_coef"), "device.pbt_interval": args.pbt_interval})
    algo = Algorithm.build("PPO", env="gymnax/CartPole-v1", **fields)
    try:
        for _ in range(args.warmup):
            algo.train()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.iterations):
            algo.train()
        return (time.perf_counter() - wall) / args.iterations, (time.process_time() - cpu) / args.iterations
    finally:
        algo.stop()


def parse_args() -> Any:
    p = argument_parser(__doc__)
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--num-envs", type=int, default=16, help="environments per member")
    p.add_argument("--pbt-interval", type=int, default=5)
    p.add_argument("--warmup", type=int, default=12, help="untimed iterations (two PBT steps at the default interval)")
    p.add_argument("--iterations", type=int, default=40, help="timed iterations per run")
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs (with and without PBT)")
    p.add_argument("--quick", action="store_true", help="1 pair, 20 timed iterations")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where pbt_overhead.json, .md and .png go")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.iterations = 1, 20
    return args


def main() -> None:
    args = parse_args()
    per_run: dict[str, list[float]] = {name: [] for name in RUNS}
    cpu_run: dict[str, list[float]] = {name: [] for name in RUNS}
    for repeat in range(args.repeats):
        for name in RUNS if repeat % 2 == 0 else RUNS[::-1]:
            wall, cpu = seconds_per_iteration(name == "pbt", args, seed=repeat)
            per_run[name].append(wall)
            cpu_run[name].append(cpu)
            log(f"{name} run {repeat}: {wall * 1e3:.1f} ms per iteration, {cpu * 1e3:.1f} ms CPU")
    medians = {name: statistics.median(v) for name, v in per_run.items()}
    cpu = {name: statistics.median(v) for name, v in cpu_run.items()}
    overhead = medians["pbt"] / medians["members"] - 1.0
    cpu_overhead = cpu["pbt"] / cpu["members"] - 1.0
    rows = [
        f"| {name} | {fmt(medians[name] * 1e3, '.1f')} | {fmt(cpu[name] * 1e3, '.1f')} | "
        f"{', '.join(f'{t * 1e3:.1f}' for t in per_run[name])} |"
        for name in RUNS
    ]
    text = "\n".join(
        [
            f"# PBT overhead: PPO, gymnax CartPole, {args.members} members x {args.num_envs} envs, "
            f"PBT every {args.pbt_interval} iterations",
            "",
            "| run | ms per iteration (median of runs) | CPU ms per iteration | each run's ms per iteration |",
            "|---|---:|---:|---|",
            *rows,
            "",
            f"Overhead of PBT: {overhead:+.1%} wall time, {cpu_overhead:+.1%} CPU time per iteration (aim: under 5%).",
        ]
    )
    report = {
        "args": vars(args),
        "machine": machine_info(),
        "per_run_s": per_run,
        "per_run_cpu_s": cpu_run,
        "overhead": overhead,
        "cpu_overhead": cpu_overhead,
    }
    write_report(args.out_dir, "pbt_overhead", report, text)
    save_figure(_figure(per_run), os.path.join(args.out_dir, "pbt_overhead.png"))


def _figure(per_run: dict[str, list[float]]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.boxplot([[t * 1e3 for t in per_run[n]] for n in RUNS], tick_labels=list(RUNS))
    ax.set_ylabel("ms per iteration (each run's mean)")
    ax.set_title("PBT overhead")
    return fig


if __name__ == "__main__":
    main()
