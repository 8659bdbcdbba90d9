"""Soak: PPO on CartPole-v1 (2 rollout workers) for ``--steps`` env steps (1M), with the
driver's resident memory and Ray's object-store usage sampled every ``--every`` seconds (10)
from a background thread; reports the least-squares slope of each in MB per minute, over
the whole run and over its second half (after the first allocations have settled).

Object-store usage is ``ray.cluster_resources()["object_store_memory"]`` less
``ray.available_resources()["object_store_memory"]``: in Ray 2.60 the raylet reports the
plasma bytes in use there (checked with a 240 MB ``ray.put``, seen within a second and gone
after its reference was dropped). The driver's count of object references it holds is
sampled too (``get_all_reference_counts``), since a leak of small objects would not show in
megabytes.

Writes ``benchmarks/results/soak.json``, ``.md`` and ``.png`` and prints the Markdown report.
"""

from __future__ import annotations

import argparse
import datetime
import os
import threading
import time
from typing import Any

import numpy as np
import psutil
import ray
from common import argument_parser, fmt, logger, machine_info, save_figure, write_report

from jaxflow import Algorithm

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MB = 1e6
SERIES = {
    "driver_rss_mb": "driver RSS (MB)",
    "object_store_mb": "object store in use (MB)",
    "object_refs": "driver's object refs",
}
log = logger("soak")


def sample(process: psutil.Process, env_steps: int, t0: float) -> dict[str, float]:
    store_total = ray.cluster_resources().get("object_store_memory", 0.0)
    store_free = ray.available_resources().get("object_store_memory", store_total)
    refs = ray._private.worker.global_worker.core_worker.get_all_reference_counts()
    return {
        "t_s": time.perf_counter() - t0,
        "env_steps": env_steps,
        "driver_rss_mb": process.memory_info().rss / MB,
        "object_store_mb": (store_total - store_free) / MB,
        "object_refs": len(refs),
    }


def slope_per_minute(samples: list[dict[str, float]], key: str) -> float | None:
    """Least-squares slope of ``key`` against time, per minute (None with fewer than 3 samples)."""
    if len(samples) < 3:
        return None
    t = np.array([s["t_s"] for s in samples]) / 60.0
    return float(np.polyfit(t, np.array([s[key] for s in samples]), 1)[0])


def soak(args: argparse.Namespace) -> tuple[list[dict[str, float]], dict[str, Any]]:
    algo = Algorithm.build("PPO", env="CartPole-v1", num_workers=args.workers, seed=args.seed)
    process, samples, steps, stop = psutil.Process(), [], [0], threading.Event()
    t0 = time.perf_counter()

    def sampler() -> None:
        while True:
            samples.append(sample(process, steps[0], t0))
            if stop.wait(args.every):
                return

    thread = threading.Thread(target=sampler, name="soak-sampler", daemon=True)
    thread.start()
    result: dict[str, Any] = {}
    try:
        while steps[0] < args.steps:
            result = algo.train()
            steps[0] = int(result["env_steps_sampled"])
    finally:
        stop.set()
        thread.join()
        samples.append(sample(process, steps[0], t0))
        algo.stop()
    return samples, result


def markdown(report: dict[str, Any]) -> str:
    s = report["slopes"]
    lines = [
        f"# Soak: PPO to {report['env_steps']:,} env steps in {report['seconds'] / 60:.1f} min "
        f"({report['env_steps'] / report['seconds']:,.0f} steps/s, load {report['machine']['load_average_at_start'][0]:.1f} at start)",
        "",
        "| series | first | last | slope per min (whole run) | slope per min (second half) |",
        "|---|---:|---:|---:|---:|",
    ]
    first, last = report["samples"][0], report["samples"][-1]
    for key, name in SERIES.items():
        lines.append(
            f"| {name} | {first[key]:,.1f} | {last[key]:,.1f} | {fmt(s[key]['whole'], '+.3f')} | {fmt(s[key]['second_half'], '+.3f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SERIES), figsize=(5 * len(SERIES), 3.6))
    t = [s["t_s"] / 60 for s in report["samples"]]
    for ax, (key, name) in zip(axes, SERIES.items(), strict=True):
        ax.plot(t, [s[key] for s in report["samples"]], marker=".")
        ax.set_title(f"{name}: {fmt(report['slopes'][key]['whole'], '+.3f')} per min", fontsize=10)
        ax.set_xlabel("minutes")
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps sampled by the run")
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--workers", type=int, default=2, help="rollout workers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where soak.json, .md and .png go")
    args = p.parse_args(argv)
    if args.steps < 1 or args.every <= 0 or args.workers < 0:
        p.error("--steps must be >= 1, --every > 0 and --workers >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    try:
        machine = machine_info()
        log(f"PPO to {args.steps:,} env steps, a sample every {args.every:g} s")
        samples, result = soak(args)
    finally:
        ray.shutdown()
    half = samples[len(samples) // 2 :]
    report = {
        "benchmark": "soak",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "machine": machine,
        "load_average_at_end": list(os.getloadavg()),
        "env_steps": int(result["env_steps_sampled"]),
        "seconds": samples[-1]["t_s"],
        "final_return": None if np.isnan(result["episode_return_mean"]) else float(result["episode_return_mean"]),
        "slopes": {
            k: {"whole": slope_per_minute(samples, k), "second_half": slope_per_minute(half, k)} for k in SERIES
        },
        "samples": samples,
    }
    write_report(args.out_dir, "soak", report, markdown(report))
    plot(report, os.path.join(args.out_dir, "soak.png"))


if __name__ == "__main__":
    main()
