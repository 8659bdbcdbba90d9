"""Device mode against rejax, each on rejax's own gymnax settings, in the same run (issue 45).

For each algorithm rejax has (PPO and DQN on CartPole-v1, SAC and TD3 on Pendulum-v1, with
the settings of rejax's ``configs/gymnax/*.yaml``), and for 1 seed and for ``--vmapped`` seeds
trained together, rejax 0.1.3 (in its own virtual environment, ``benchmarks/.venvs/rejax``,
made on first use: rejax 0.1.3 needs ``gymnax<1.0``) and jaxflow's device mode with the same
settings take turns, ``--repeats`` times. Reported, medians over repeats: env steps/s after
compilation (all seeds' steps) and the seconds to the target return, and jaxflow / rejax.

rejax trains its whole budget in one compiled call, with a 128-episode evaluation every
``eval_freq`` env steps inside it: its time counts a second call of the compiled function
(fresh seeds), evaluations included; its time to the target is the first evaluation that
reaches it, at that share of the call. jaxflow does the same work: its evaluation during
training (128 greedy episodes every ``eval_freq`` env steps, compiled on the device), one
result per evaluation; its time counts ``train()`` calls after the first (compiling) one,
results, guards and metrics included, and its time to the target is the first evaluation
that reaches it, plus the first call's share of the steps.

    .venv/bin/python benchmarks/device_vs_rejax.py                 # 4 algorithms, 1 and 8 seeds, 3 repeats
    .venv/bin/python benchmarks/device_vs_rejax.py --algos ppo --repeats 1 --scale 0.2   # a quick look
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (
    argument_parser,
    fmt,
    logger,
    machine_info,
    median_of_measured,
    median_of_reached,
    own_venv,
    ratio,
    save_figure,
    write_report,
)
from rejax_settings import SETTINGS, jaxflow_fields

log = logger("device_vs_rejax")
HERE = os.path.dirname(os.path.abspath(__file__))
REJAX_VENV = os.path.join(HERE, ".venvs", "rejax")
REJAX_PINS = ("rejax==0.1.3", "gymnax==0.0.9")  # gymnax 1.0's step returns one more value than rejax 0.1.3 takes
OUT_DIR = os.path.join(HERE, "results", "device_vs_rejax")


def same_jax() -> list[str]:
    """jaxflow's JAX version, pinned in rejax's environment so both run the same XLA."""
    from importlib.metadata import version

    return [f"jax=={version('jax')}", f"jaxlib=={version('jaxlib')}"]


def run_rejax(python: str, algo: str, seeds: int, scale: float) -> dict[str, Any]:
    """One compile-and-run and one timed run of rejax in its own environment (``rejax_run.py``)."""
    setting = SETTINGS[algo]
    config = {**setting.rejax, "total_timesteps": setting.steps(scale)}
    spec = {"algo": algo, "config": config, "seeds": seeds, "repeats": 1}
    done = subprocess.run(
        [python, os.path.join(HERE, "rejax_run.py")], input=json.dumps(spec), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"rejax {algo} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    run_s, total = out["runs_s"][0], config["total_timesteps"]
    hit = next((steps for steps, value in out["curve"] if value >= setting.target), None)
    return {
        "steps_per_s": seeds * total / run_s,
        "to_target_s": None if hit is None else run_s * hit / total,
        "compile_s": out["first_s"] - run_s,
        "final_return": out["curve"][-1][1],
        "curve": out["curve"],
    }


def run_jaxflow(algo: str, seeds: int, scale: float, iterations_per_call: int | None) -> dict[str, Any]:
    """jaxflow's device mode on the same settings through ``Algorithm.train()``."""
    from jaxflow import Algorithm

    setting = SETTINGS[algo]
    fields = jaxflow_fields(algo, setting.steps(scale), iterations_per_call)
    t0 = time.perf_counter()
    run = Algorithm.build(setting.jaxflow_algo, env=setting.env, seed=0, num_seeds=seeds, **fields)
    try:
        result = run.train()
        first_s, start = time.perf_counter() - t0, int(result["env_steps_sampled"])
        t1, hit, curve = time.perf_counter(), None, []
        while result["env_steps_sampled"] < setting.steps(scale):
            result = run.train()
            steps, value = int(result["env_steps_sampled"]), greedy_return(result)
            curve.append([steps, value])
            if hit is None and value >= setting.target:
                hit = (time.perf_counter() - t1, steps)
        loop_s = time.perf_counter() - t1
    finally:
        run.stop()
    if not curve:
        raise SystemExit(f"{algo}: the first train() sampled the whole budget ({start:,} env steps): raise --scale")
    rate = (int(result["env_steps_sampled"]) - start) / loop_s  # per seed
    return {
        "steps_per_s": seeds * rate,
        "to_target_s": None if hit is None else hit[0] + start / rate,
        "compile_s": first_s - start / rate,
        "final_return": greedy_return(result),
        "curve": curve,
        "iterations_per_call": run.config.device.iterations_per_call,
    }


def greedy_return(result: dict[str, Any]) -> float:
    """The mean return of the result's evaluation (NaN where it has none)."""
    return float(result.get("evaluation", {}).get("episode_return_mean", float("nan")))


def measure(args: Any, python: str) -> list[dict[str, Any]]:
    rows = []
    for algo in args.algos:
        for seeds in sorted({1, args.vmapped}):
            runs: dict[str, list[dict[str, Any]]] = {"rejax": [], "jaxflow": []}
            for r in range(args.repeats):
                log(f"{algo} x{seeds} repeat {r + 1}/{args.repeats}: rejax, then jaxflow")
                runs["rejax"].append(run_rejax(python, algo, seeds, args.scale))
                runs["jaxflow"].append(run_jaxflow(algo, seeds, args.scale, args.iterations_per_call))
            row = {"algo": algo, "seeds": seeds, "runs": runs, "target": SETTINGS[algo].target}
            for key, median in (
                ("steps_per_s", median_of_measured),
                ("to_target_s", median_of_reached),  # None where most runs missed the target
                ("compile_s", median_of_measured),
            ):
                row[key] = {lib: median([r[key] for r in rs]) for lib, rs in runs.items()}
            row["ratio_steps_per_s"] = ratio(row["steps_per_s"]["jaxflow"], row["steps_per_s"]["rejax"])
            row["ratio_to_target"] = ratio(row["to_target_s"]["rejax"], row["to_target_s"]["jaxflow"])
            rows.append(row)
            log(f"{algo} x{seeds}: {row['steps_per_s']} steps/s, ratio {fmt(row['ratio_steps_per_s'], '.2f')}")
    return rows


def table(rows: list[dict[str, Any]], args: Any) -> str:
    lines = [
        "# Device mode against rejax 0.1.3, rejax's gymnax settings",
        "",
        f"Medians of {args.repeats} repeats, budgets x{args.scale} of rejax's; each ratio is jaxflow over rejax "
        "(speed-up: above 1 jaxflow is faster). Both judge the target by a greedy 128-episode evaluation "
        "every eval_freq env steps (rejax's).",
        "",
        "| algorithm | seeds | rejax steps/s | jaxflow steps/s | ratio | target | rejax s to target | jaxflow s | ratio | compile s (rejax / jaxflow) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        sps, tt, cs = row["steps_per_s"], row["to_target_s"], row["compile_s"]
        lines.append(
            f"| {row['algo']} | {row['seeds']} | {fmt(sps['rejax'], ',.0f')} | {fmt(sps['jaxflow'], ',.0f')} | "
            f"{fmt(row['ratio_steps_per_s'], '.2f')} | {row['target']:g} | {fmt(tt['rejax'], '.1f')} | "
            f"{fmt(tt['jaxflow'], '.1f')} | {fmt(row['ratio_to_target'], '.2f')} | "
            f"{fmt(cs['rejax'], '.1f')} / {fmt(cs['jaxflow'], '.1f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Bars of jaxflow / rejax env steps/s per algorithm and seed count, 1.0 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [f"{r['algo']} x{r['seeds']}" for r in rows]
    ax.bar(names, [r["ratio_steps_per_s"] or 0.0 for r in rows], color="tab:blue")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_ylabel("jaxflow / rejax env steps/s")
    ax.set_title("Device mode against rejax (same run, rejax's settings)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    p = argument_parser(__doc__)
    p.add_argument("--algos", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    p.add_argument("--vmapped", type=int, default=8, help="seeds trained together in the second row of each algorithm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of rejax's env-step budgets")
    p.add_argument("--iterations-per-call", type=int, default=None, help="jaxflow's (default: its config's)")
    p.add_argument("--rejax-venv", default=REJAX_VENV, help="rejax's virtual environment (made if missing)")
    p.add_argument("--out", default=OUT_DIR)
    args = p.parse_args(argv)
    python = own_venv(args.rejax_venv, [[*REJAX_PINS, *same_jax()]], log)
    info = machine_info()
    rows = measure(args, python)
    info["load_average_at_end"] = list(os.getloadavg())
    text = table(rows, args)
    write_report(args.out, "device_vs_rejax", {"machine": info, "args": vars(args), "rows": rows}, text)
    plot(rows, os.path.join(args.out, "device_vs_rejax.png"))


if __name__ == "__main__":
    main()
