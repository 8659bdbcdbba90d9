"""``continuous.py``'s report: medians over seeds with ratios against SBX, the Markdown tables
and the learning curves."""

from __future__ import annotations

import itertools
from typing import Any

from common import fmt, median_of_measured, ratio, save_figure
from continuous_settings import CURVE_STEP, WARM_POINTS, Run

RATES = ("env_steps_per_s", "steady_env_steps_per_s", "grad_steps_per_s", "cpu_ms_per_grad_step")
"""Compared with SBX as ratios of medians (CPU per gradient step: above 1, jaxflow spends more)."""


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    """Medians over seeds per env x algo x runner, with ratios against SBX's medians."""
    keys = list(dict.fromkeys((r.env, r.algo, r.runner) for r in runs))
    rows = []
    for env, algo, runner in keys:
        mine = [r for r in runs if (r.env, r.algo, r.runner) == (env, algo, runner) and r.error is None]
        row: dict[str, Any] = {"env": env, "algo": algo, "runner": runner, "runs": len(mine)}
        row["failed_runs"] = sum((r.env, r.algo, r.runner) == (env, algo, runner) for r in runs) - len(mine)
        for field in ("env_steps", "build_s", "cpu_cores", *RATES):
            row[f"median_{field}"] = median_of_measured([getattr(r, field) for r in mine])
        row["median_final_return"] = median_of_measured([r.final_return for r in mine])
        row["median_curve"] = median_curve([r.curve for r in mine])
        rows.append(row)
    for row in rows:
        sbx = next((x for x in rows if (x["env"], x["algo"], x["runner"]) == (row["env"], row["algo"], "sbx")), {})
        for field in RATES:
            row[f"{field}_over_sbx"] = ratio(row[f"median_{field}"], sbx.get(f"median_{field}"))
    return rows


def median_curve(curves: list[list[list[float | None]]]) -> list[list[float | None]]:
    """Point by point over seeds (the i-th point of every run): median env steps and return."""
    points = []
    for i in range(min((len(c) for c in curves), default=0)):
        steps = median_of_measured([c[i][0] for c in curves])
        points.append([steps, median_of_measured([c[i][1] for c in curves])])
    return points


def markdown(report: dict[str, Any]) -> str:
    m, a = report["machine"], report["args"]
    load = ", ".join(f"{x:.2f}" for x in m["load_average_at_start"])
    lines = [
        "# SAC and TD3: jaxflow against Stable-Baselines-Jax, same hyperparameters, same run",
        "",
        (
            f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start {load}, "
            f"at end {', '.join(f'{x:.2f}' for x in report['load_average_at_end'])} · jax {m['jax']} · ray {m['ray']} "
            f"· SBX {report['sbx_versions'].get('sbx-rl', '—')} (its jax {report['sbx_versions'].get('jax', '—')}) "
            f"· seeds {a['seeds']}"
        ),
        "",
    ]
    if a["note"]:
        lines += [f"**Note:** {a['note']}", ""]
    lines += [
        (
            f"Rates over the whole training loop (compilation included); steady rates after the first "
            f"{WARM_POINTS * CURVE_STEP:,} env steps (learning_starts, then the first gradient steps and their "
            "compilation). "
            f"Return: mean of the episodes of the last {CURVE_STEP:,} env steps, at the budget. Medians over seeds; "
            "ratios are of medians, against SBX in the same run."
        ),
        "",
        (
            "| env | algo | runner | runs | env steps | env steps/s | steady env steps/s | steady grad steps/s "
            "| steady CPU ms / grad step | CPU cores busy | final return | env steps/s / SBX | steady / SBX "
            "| grad steps/s / SBX | CPU / grad step / SBX | build (s) |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["summary"]:
        failed = f" ({r['failed_runs']} failed)" if r["failed_runs"] else ""
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['runner']} | {r['runs']}{failed} | {fmt(r['median_env_steps'], ',.0f')} "
            f"| {fmt(r['median_env_steps_per_s'], ',.0f')} | {fmt(r['median_steady_env_steps_per_s'], ',.0f')} "
            f"| {fmt(r['median_grad_steps_per_s'], ',.0f')} | {fmt(r['median_cpu_ms_per_grad_step'], '.2f')} "
            f"| {fmt(r['median_cpu_cores'], '.2f')} | {fmt(r['median_final_return'], '.0f')} "
            f"| {fmt(r['env_steps_per_s_over_sbx'], '.2f')} | {fmt(r['steady_env_steps_per_s_over_sbx'], '.2f')} "
            f"| {fmt(r['grad_steps_per_s_over_sbx'], '.2f')} | {fmt(r['cpu_ms_per_grad_step_over_sbx'], '.2f')} "
            f"| {fmt(r['median_build_s'], '.1f')} |"
        )
    lines += [
        "",
        (
            "| env | algo | runner | seed | load at start | env steps | loop (s) | env steps/s | steady env steps/s "
            "| steady grad steps/s | CPU ms / grad step | CPU cores busy | final return | error |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['runner']} | {r['seed']} | {r['load_at_start']:.2f} "
            f"| {fmt(r['env_steps'], ',d')} | {fmt(r['loop_s'], '.1f')} | {fmt(r['env_steps_per_s'], ',.0f')} "
            f"| {fmt(r['steady_env_steps_per_s'], ',.0f')} | {fmt(r['grad_steps_per_s'], ',.0f')} "
            f"| {fmt(r['cpu_ms_per_grad_step'], '.2f')} | {fmt(r.get('cpu_cores'), '.2f')} "
            f"| {fmt(r['final_return'], '.0f')} | {r['error'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    """Median learning curves, one panel per env (rows) x algo (columns), one line per runner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in report["summary"]))
    algos = list(dict.fromkeys(r["algo"] for r in report["summary"]))
    fig, axes = plt.subplots(len(envs), len(algos), figsize=(5 * len(algos), 3.6 * len(envs)), squeeze=False)
    for (i, env), (j, algo) in itertools.product(enumerate(envs), enumerate(algos)):
        ax = axes[i][j]
        for r in (r for r in report["summary"] if (r["env"], r["algo"]) == (env, algo)):
            points = [(x, y) for x, y in r["median_curve"] if y is not None]
            if points:
                label = f"{r['runner']} ({fmt(r['median_env_steps_per_s'], ',.0f')} steps/s)"
                ax.plot(*zip(*points), marker=".", label=label)
        ax.set_title(f"{algo} on {env}", fontsize=10)
        ax.set_xlabel("env steps")
        ax.set_ylabel(f"training return (median of {len(report['args']['seeds'])} seeds)")
        ax.legend(fontsize=7)
    save_figure(fig, path)
