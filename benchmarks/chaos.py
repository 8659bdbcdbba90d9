"""Chaos run: PPO (2 rollout workers) and Ape-X (2 workers, 2 replay shards) on CartPole-v1,
each a fault-free run and a chaos run of the same wall-clock length, in one script.

The chaos run kills a random rollout worker or replay shard with ``ray.kill`` every
``--kill-every`` seconds from a background thread and, at mid-run, interrupts the driver:
it checkpoints, stops the algorithm and continues from ``Algorithm.restore``. Both runs use
``on_worker_failure="restart"`` and write a checkpoint every ``--checkpoint-every`` seconds
(which a killed shard reloads). The fault-free run is not interrupted: a stop and a restore
(new worker processes, a learner built again; what they compile comes from jaxflow's XLA
cache where the run compiled it before) is one of the faults whose cost the throughput
ratio is meant to show, while periodic checkpoints are part of any long run, so both pay them.

Reported per algorithm (medians over ``--repeats``): env steps/s of each run and their ratio
(the aim: chaos / fault-free >= 0.8), kills and restarts, every replay restore against the
checkpoint it read (equal sizes required), the final training return of each run and the
fault-free run's range (the spread of its ``episode_return_mean`` over its last quarter of
iterations, over all repeats). The fault-tolerance logic is ``tests/chaos_driver.py``, which
the shortened test ``tests/integration/test_chaos.py`` runs too.

Writes ``benchmarks/results/chaos.json``, ``.md`` and ``.png`` and prints the Markdown report.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
from typing import Any

from common import argument_parser, fmt, logger, machine_info, median_of_measured, ratio, save_figure, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # the chaos driver the test runs too

from chaos_driver import SHARD, WORKER, ChaosReport, Schedule, chaos_run

from jaxflow import Algorithm

RESULTS_DIR = os.path.join(HERE, "results")
CONFIGS: dict[str, dict[str, Any]] = {
    "PPO": dict(env="CartPole-v1", num_workers=2, on_worker_failure="restart"),
    "APEX": dict(env="CartPole-v1", num_workers=2, num_replay_shards=2, on_worker_failure="restart"),
}
AIM_RATIO = 0.8
LAST_FRACTION = 0.25  # of a fault-free run's iterations, whose returns make its range
log = logger("chaos")


def one_run(algo: str, chaos: bool, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    seconds = args.minutes * 60.0
    schedule = Schedule(
        length=seconds,
        kill_every=args.kill_every if chaos else None,
        interrupt=chaos,
        checkpoint_every=args.checkpoint_every,
        seed=seed,
    )
    kind = "chaos" if chaos else "fault-free"
    log(f"{algo} {kind} run, seed {seed}, {args.minutes:g} min (load {os.getloadavg()[0]:.1f})")
    with tempfile.TemporaryDirectory(prefix=f"chaos-{algo}-") as directory:
        report = chaos_run(lambda: Algorithm.build(algo, seed=seed, **CONFIGS[algo]), schedule, directory)
    summary = summarize(report)
    log(f"  {summary['env_steps_per_s']:,.0f} env steps/s, kills {summary['kills']}, return {summary['final_return']}")
    return dict(algo=algo, kind=kind, seed=seed, **summary)


def summarize(report: ChaosReport) -> dict[str, Any]:
    last = report.returns[-max(1, int(len(report.returns) * LAST_FRACTION)) :]
    finite = [r for r in last if not math.isnan(r)]
    return {
        "seconds": report.seconds,
        "env_steps": report.timed_env_steps,
        "env_steps_per_s": report.steps_per_s,
        "kills": {WORKER: report.kills_of(WORKER), SHARD: report.kills_of(SHARD)},
        "kill_times_s": [t for t, _, _ in report.kills],
        "worker_restarts": report.worker_restarts,
        "shard_restarts": report.shard_restarts,
        "interrupted_at_s": report.interrupted_at,
        "restores": [
            dict(kind=r.kind, shard=r.shard, saved=r.saved, restored=r.restored, equal=r.equal) for r in report.restores
        ],
        "restores_equal": all(r.equal for r in report.restores),
        "final_return": report.final_return,
        "last_quarter_returns": [min(finite), max(finite)] if finite else None,
        "progress": report.progress,
    }


def summarize_algo(algo: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    free = [r for r in runs if r["algo"] == algo and r["kind"] == "fault-free"]
    chaos = [r for r in runs if r["algo"] == algo and r["kind"] == "chaos"]
    ranges = [r["last_quarter_returns"] for r in free if r["last_quarter_returns"]]
    span = [min(lo for lo, _ in ranges), max(hi for _, hi in ranges)] if ranges else None
    free_rate = median_of_measured([r["env_steps_per_s"] for r in free])
    chaos_rate = median_of_measured([r["env_steps_per_s"] for r in chaos])
    finals = [r["final_return"] for r in chaos]
    return {
        "algo": algo,
        "fault_free_steps_per_s": free_rate,
        "chaos_steps_per_s": chaos_rate,
        "ratio": ratio(chaos_rate, free_rate),
        "kills": {k: sum(r["kills"][k] for r in chaos) for k in (WORKER, SHARD)},
        "worker_restarts": sum(r["worker_restarts"] for r in chaos),
        "shard_restarts": sum(r["shard_restarts"] for r in chaos),
        "restores": sum(len(r["restores"]) for r in chaos),
        "restores_equal": all(r["restores_equal"] for r in chaos),
        "fault_free_final_return": median_of_measured([r["final_return"] for r in free]),
        "chaos_final_return": median_of_measured(finals),
        "fault_free_range": span,
        "chaos_final_within_range": span is not None and all(f is not None and span[0] <= f <= span[1] for f in finals),
    }


def markdown(report: dict[str, Any]) -> str:
    a = report["args"]
    lines = [
        f"# Chaos run ({a['minutes']:g} min per run, a kill every {a['kill_every']:g} s, "
        f"{a['repeats']} repeat(s), load {report['machine']['load_average_at_start'][0]:.1f} at start)",
        "",
        "| algo | fault-free steps/s | chaos steps/s | ratio | kills (workers / shards) | restarts (workers / shards) "
        "| replay restores equal | final return fault-free / chaos | fault-free range | within |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for s in report["summary"]:
        span = s["fault_free_range"]
        lines.append(
            f"| {s['algo']} | {fmt(s['fault_free_steps_per_s'], ',.0f')} | {fmt(s['chaos_steps_per_s'], ',.0f')} "
            f"| {fmt(s['ratio'], '.2f')} | {s['kills'][WORKER]} / {s['kills'][SHARD]} "
            f"| {s['worker_restarts']} / {s['shard_restarts']} | {s['restores']} restores, "
            f"{'all equal' if s['restores_equal'] else 'NOT EQUAL'} "
            f"| {fmt(s['fault_free_final_return'], '.1f')} / {fmt(s['chaos_final_return'], '.1f')} "
            f"| {'—' if span is None else f'{span[0]:.1f}–{span[1]:.1f}'} | {'yes' if s['chaos_final_within_range'] else 'no'} |"
        )
    lines += ["", f"Aim: chaos / fault-free >= {AIM_RATIO}; every replay restore equal to its checkpoint."]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    """Env steps against time, one panel per algorithm: each run, kills as ticks, the interrupt as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algos = [s["algo"] for s in report["summary"]]
    fig, axes = plt.subplots(1, len(algos), figsize=(5.5 * len(algos), 4), squeeze=False)
    for ax, algo in zip(axes[0], algos, strict=True):
        for r in (r for r in report["runs"] if r["algo"] == algo):
            t = [p[0] for p in r["progress"]]
            steps = [p[2] for p in r["progress"]]
            (line,) = ax.plot(t, steps, label=f"{r['kind']} seed {r['seed']} ({r['env_steps_per_s']:,.0f}/s)")
            for k in r["kill_times_s"]:
                ax.axvline(k, color=line.get_color(), alpha=0.25, lw=0.8)
            if r["interrupted_at_s"] is not None:
                ax.axvline(r["interrupted_at_s"], color=line.get_color(), ls="--")
        ax.set_title(f"{algo}: kills (thin), interrupt (dashed)", fontsize=10)
        ax.set_xlabel("seconds")
        ax.set_ylabel("env steps sampled")
        ax.legend(fontsize=7)
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--algos", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    p.add_argument("--minutes", type=float, default=5.0, help="wall-clock length of each run")
    p.add_argument("--kill-every", type=float, default=30.0, help="seconds between kills in the chaos run")
    p.add_argument("--checkpoint-every", type=float, default=60.0, help="seconds between checkpoints (both runs)")
    p.add_argument("--repeats", type=int, default=1, help="fault-free and chaos runs per algorithm (seeds 0, 1, ...)")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where chaos.json, .md and .png go")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.kill_every <= 0 or args.checkpoint_every <= 0 or args.repeats < 1:
        p.error("--minutes, --kill-every and --checkpoint-every must be > 0 and --repeats >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    runs: list[dict[str, Any]] = []
    try:
        machine = machine_info()
        for seed in range(args.repeats):
            for algo in args.algos:
                # The order alternates by repeat, so that a drift in the load touches both alike.
                for chaos in (False, True) if seed % 2 == 0 else (True, False):
                    runs.append(one_run(algo, chaos, args, seed))
    finally:
        ray.shutdown()
    report = {
        "benchmark": "chaos",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "configs": CONFIGS,
        "machine": machine,
        "load_average_at_end": list(os.getloadavg()),
        "summary": [summarize_algo(algo, runs) for algo in args.algos],
        "runs": runs,
    }
    write_report(args.out_dir, "chaos", report, markdown(report))
    plot(report, os.path.join(args.out_dir, "chaos.png"))


if __name__ == "__main__":
    main()
