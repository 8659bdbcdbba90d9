"""A tuned example's sample efficiency over seeds: env steps (and wall time) to its stated
return, as ``jaxflow train --config examples/tuned/<name>.json --seed S`` runs it, for the
file as it stands and for variants of its settings, one run at a time or ``--parallel N``.

Each run is a fresh ``jaxflow train`` process (its own local Ray), so a run measures what a
user's run does. A run that stops on its env-step budget below the stated return counts as
missed. Writes ``benchmarks/results/tuned_examples.{json,md,png}`` and prints the table.

    .venv/bin/python benchmarks/tuned_examples.py --example dqn-cartpole --seeds 0 1 2 \\
        --vary frag64:num_envs_per_worker=8,rollout_fragment_length=16,max_weight_sync_delay=256
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import argument_parser, machine_info, save_figure, write_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")
AS_IS = "as-is"
"""The variant name of the example file with nothing changed."""
RUN_TIMEOUT_S = 1800


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``"name:a=1,b=2"`` -> ``("name", ["a=1", "b=2"])``, the ``--set`` items of a variant."""
    name, sep, sets = text.partition(":")
    if not sep or not name or not sets:
        raise SystemExit(f"--vary {text!r}: expected NAME:FIELD=VALUE[,FIELD=VALUE...]")
    return name, sets.split(",")


def run_once(example: str, sets: list[str], seed: int, metric: str) -> dict[str, Any]:
    """One ``jaxflow train`` of the example; its last result's env steps, ``metric`` (a key
    ``a/b`` is ``result[a][b]``; -inf where the result has none) and training return, and the wall time."""
    with tempfile.TemporaryDirectory(prefix="tuned-") as logdir:
        argv = [sys.executable, "-m", "jaxflow.api.cli", "train", "--config", example, "--seed", str(seed)]
        argv += [a for s in sets for a in ("--set", s)] + ["--logdir", logdir, "--overwrite", "--quiet"]
        start = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        wall = time.monotonic() - start
        if done.returncode != 0:
            return {"seed": seed, "error": done.stderr.strip().splitlines()[-1:]}
        with open(os.path.join(logdir, "progress.jsonl"), encoding="utf-8") as f:
            last = [json.loads(line) for line in f][-1]
    return {
        "seed": seed,
        "env_steps": int(last["env_steps_sampled"]),
        "return": metric_value(last, metric),
        "training_return": float(last["episode_return_mean"]),
        "wall_s": wall,
    }


def metric_value(result: dict[str, Any], metric: str) -> float:
    """``result``'s value of ``metric`` (``a/b``: ``result[a][b]``), -inf where it has none."""
    value: Any = result
    for part in metric.split("/"):
        value = value.get(part) if isinstance(value, dict) else None
    return float("-inf") if value is None else float(value)


def summary(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """Seeds that reached the target, and the median and largest env steps and median wall time of those."""
    reached = [r for r in runs if "error" not in r and r["return"] >= target]
    steps = [r["env_steps"] for r in reached]
    return {
        "reached": f"{len(reached)}/{len(runs)}",
        "median_env_steps": statistics.median(steps) if steps else None,
        "max_env_steps": max(steps) if steps else None,
        "median_wall_s": statistics.median(r["wall_s"] for r in reached) if reached else None,
    }


def table(example: str, metric: str, target: float, variants: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"# `{example}`: env steps to {metric} {target:g}",
        "",
        "| variant | --set | reached | median env steps | max env steps | median wall s | per seed (env steps, return) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, v in variants.items():
        s = v["summary"]
        seeds = ", ".join(
            f"{r['seed']}: error" if "error" in r else f"{r['seed']}: {r['env_steps']:,} ({r['return']:.0f})"
            for r in v["runs"]
        )
        med, top, wall = s["median_env_steps"], s["max_env_steps"], s["median_wall_s"]
        lines.append(
            f"| {name} | {' '.join(v['sets']) or '—'} | {s['reached']} | {'—' if med is None else f'{med:,.0f}'} "
            f"| {'—' if top is None else f'{top:,}'} | {'—' if wall is None else f'{wall:.0f}'} | {seeds} |"
        )
    return "\n".join(lines) + "\n"


def plot(path: str, metric: str, target: float, variants: dict[str, dict[str, Any]]) -> None:
    """Env steps per seed, one column per variant; a missed seed drawn at its budget as an x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(variants), 4))
    for i, v in enumerate(variants.values()):
        for r in v["runs"]:
            if "error" not in r:
                ax.plot(i, r["env_steps"], "o" if r["return"] >= target else "x", color=f"C{i}")
    ax.set_xticks(range(len(variants)), list(variants))
    ax.set_ylabel(f"env steps to {metric} {target:g}")
    save_figure(fig, path)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--example", default="dqn-cartpole", help="a name under examples/tuned/")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--vary", action="append", default=[], help="NAME:FIELD=VALUE[,...], repeatable")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (CI runs 2 test processes)")
    args = parser.parse_args()
    example = os.path.join(ROOT, "examples", "tuned", f"{args.example}.json")
    with open(example, encoding="utf-8") as f:
        ((metric, target),) = json.load(f)["reaches"].items()
    variants: dict[str, dict[str, Any]] = {AS_IS: {"sets": []}}
    variants.update({name: {"sets": sets} for name, sets in map(parse_vary, args.vary)})
    for name, v in variants.items():
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            runs = [pool.submit(run_once, example, v["sets"], seed, metric) for seed in args.seeds]
            v["runs"] = [run.result() for run in runs]
        for run in v["runs"]:
            print(f"{name}: {run}", flush=True)
        v["summary"] = summary(v["runs"], target)
    report = {"example": args.example, "metric": metric, "target": target, "variants": variants}
    report.update(parallel=args.parallel, machine=machine_info())
    write_report(RESULTS_DIR, "tuned_examples", report, table(args.example, metric, target, variants))
    plot(os.path.join(RESULTS_DIR, "tuned_examples.png"), metric, target, variants)


if __name__ == "__main__":
    main()
