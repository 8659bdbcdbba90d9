"""The same benchmarks on two commits, in one run on one machine: "no slower" checks.

Runs ``ppo_cartpole.py``, ``dqn_cartpole.py`` and ``device_mode.py`` in a checkout of a
base commit and in this one, alternating which goes first from round to round so that a
drift in the machine's load hits both alike, and reports each throughput's median over
rounds and the ratio head / base. The base checkout is a temporary git worktree with its
own virtual environment, unless ``--base-dir`` and ``--base-python`` name an existing one.

    python benchmarks/compare_commits.py --base aa08df6 --rounds 3
    python benchmarks/compare_commits.py --base-dir ../main --base-python ../main/.venv/bin/python

Writes ``compare_commits.json``, ``.md`` and ``.png`` under ``--out-dir`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from common import fmt, logger, machine_info, ratio, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
log = logger("compare")


def _first(items: list[dict[str, Any]], key: str) -> float | None:
    values = [x[key] for x in items if x.get(key) is not None]
    return values[0] if values else None


# benchmark -> (script, its output flag, quick arguments, metrics: name -> reader of its JSON report)
BENCHMARKS: dict[str, tuple[str, str, list[str], dict[str, Callable[[dict[str, Any]], float | None]]]] = {
    "ppo_cartpole": (
        "ppo_cartpole.py",
        "--out-dir",
        [
            "--seeds",
            "0",
            "--workers",
            "2",
            "--max-steps",
            "60000",
            "--overhead-iterations",
            "20",
            "--overhead-reps",
            "3",
        ],
        {"PPO env steps/s (2 workers)": lambda r: _first(r["summary"], "median_steps_per_s")},
    ),
    "dqn_cartpole": (
        "dqn_cartpole.py",
        "--out-dir",
        ["--seeds", "0", "--max-steps", "20000", "--apex-workers", "2", "--apex-steps", "20000"],
        {
            "DQN env steps/s": lambda r: r["dqn_summary"]["median_steps_per_s"],
            "Ape-X env steps/s (2 workers)": lambda r: _first(r["apex_summary"], "median_steps_per_s"),
        },
    ),
    "device_mode": (
        "device_mode.py",
        "--out",
        ["--quick"],
        {
            "device PPO env steps/s (CartPole)": lambda r: r["cartpole"][0]["jaxflow"]["env_steps_per_s"],
            "device PPO env steps/s (MinAtar Breakout)": lambda r: r["minatar_breakout"]["env_steps_per_s"],
        },
    ),
}


def base_checkout(rev: str, workdir: str) -> tuple[str, str]:
    """A worktree of ``rev`` with its project installed in its own virtual environment."""
    tree = os.path.join(workdir, "base")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", tree, rev], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", os.path.join(tree, ".venv")], check=True)
    python = os.path.join(tree, ".venv", "bin", "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "-e", f"{tree}[test]"], check=True)
    return tree, python


def run_one(name: str, tree: str, python: str, out_dir: str, quick: bool) -> dict[str, float | None]:
    script, out_flag, quick_args, metrics = BENCHMARKS[name]
    cmd = [python, os.path.join(tree, "benchmarks", script), out_flag, out_dir, *(quick_args if quick else [])]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"{name} failed in {tree}: {proc.stderr[-2000:]}")
        return dict.fromkeys(metrics)
    with open(os.path.join(out_dir, f"{name}.json"), encoding="utf-8") as f:
        report = json.load(f)
    return {metric: read(report) for metric, read in metrics.items()}


def compare(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    if args.base_dir:
        base = (args.base_dir, args.base_python or sys.executable)
    else:
        base = base_checkout(args.base, workdir)
    trees = {"base": base, "head": (REPO, sys.executable)}
    samples: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    for rnd in range(args.rounds):
        order = ["base", "head"] if rnd % 2 == 0 else ["head", "base"]
        for name in args.benchmarks:
            for side in order:
                log(f"round {rnd + 1}/{args.rounds}: {name} on {side}")
                out_dir = os.path.join(workdir, f"{side}-{name}-{rnd}")
                for metric, value in run_one(name, *trees[side], out_dir, not args.full).items():
                    if value is not None:
                        samples[side].setdefault(metric, []).append(value)
    metrics = sorted(set(samples["base"]) | set(samples["head"]))
    rows = []
    for m in metrics:
        b, h = samples["base"].get(m, []), samples["head"].get(m, [])
        mb, mh = (statistics.median(b) if b else None), (statistics.median(h) if h else None)
        rows.append(
            {"metric": m, "base": mb, "head": mh, "head_over_base": ratio(mh, mb), "samples": {"base": b, "head": h}}
        )
    return {"base": args.base or args.base_dir, "rounds": args.rounds, "quick": not args.full, "rows": rows}


def markdown(report: dict[str, Any], machine: dict[str, Any]) -> str:
    lines = [
        f"# This checkout against {report['base']}: medians of {report['rounds']} rounds"
        f"{' (quick settings)' if report['quick'] else ''}, {machine['cpu_count']} CPUs",
        "",
        "| metric | base | head | head / base |",
        "|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['metric']} | {fmt(r['base'], ',.0f')} | {fmt(r['head'], ',.0f')} | {fmt(r['head_over_base'], '.3f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["head_over_base"] is not None]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.5))
    ax.barh([r["metric"] for r in rows], [r["head_over_base"] for r in rows], color="tab:blue")
    ax.axvline(1.0, color="k", linewidth=1)
    for x in (0.97, 1.03):
        ax.axvline(x, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("head / base (median env steps/s; 1 = as fast, dotted: ±3%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="the base commit (a temporary worktree and venv are made for it)")
    p.add_argument("--base-dir", help="an existing checkout of the base commit, instead of --base")
    p.add_argument("--base-python", help="the Python of --base-dir's environment")
    p.add_argument("--rounds", type=int, default=2, help="measurements of each side, order alternating")
    p.add_argument("--benchmarks", nargs="+", choices=sorted(BENCHMARKS), default=sorted(BENCHMARKS))
    p.add_argument("--full", action="store_true", help="each benchmark's own default settings (hours), not quick ones")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    if bool(args.base) == bool(args.base_dir):
        p.error("give exactly one of --base REV and --base-dir DIR")
    with tempfile.TemporaryDirectory(prefix="jaxflow-compare-") as workdir:
        try:
            report = compare(args, workdir)
        finally:
            if args.base:
                subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", os.path.join(workdir, "base")])
    machine = machine_info()
    report["machine"] = machine
    write_report(args.out_dir, "compare_commits", report, markdown(report, machine))
    plot(report, os.path.join(args.out_dir, "compare_commits.png"))


if __name__ == "__main__":
    main()
