"""The tuned CartPole DQN against RLlib's, measured in the same run: env steps and wall time
until the training return (the mean of the last 100 ended episodes) reaches 450, per seed.

RLlib runs its own example config (``rllib_dqn_run.py``) in its own virtual environment
(``benchmarks/.venvs/rllib``, made on first use: the same Ray version as jaxflow's, with
RLlib's extras and PyTorch's CPU build). jaxflow runs ``examples/tuned/dqn-cartpole.json``
as ``jaxflow train`` does, stopping on its training return instead of the file's greedy
evaluation (and without that evaluation, which RLlib's example does not run). Both metrics
are computed the same way: RLlib's runner records every ended episode, and jaxflow's
``episode_return_mean`` is the mean of the last 100. RLlib's own reported
``episode_return_mean`` is shown beside it. Runs go one at a time, the two libraries
alternating which runs first. Writes ``benchmarks/results/dqn_vs_rllib.{json,md,png}``.

    .venv/bin/python benchmarks/dqn_vs_rllib.py --seeds 0 1 2
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from typing import Any

from common import argument_parser, machine_info, save_figure, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, "results")
RLLIB_VENV = os.path.join(HERE, ".venvs", "rllib")
TORCH_VERSION = "2.13.0"  # the local CPU build, as continuous.py's SBX environment has
EXAMPLE = os.path.join(ROOT, "examples", "tuned", "dqn-cartpole.json")
EVALUATION_KEYS = ("evaluation_interval", "evaluation_episodes")
TARGET = 450.0
WINDOW = 100
RUN_TIMEOUT_S = 3600


def rllib_python(venv: str) -> tuple[str, dict[str, str]]:
    """RLlib's environment's Python, made on first use with jaxflow's Ray version."""
    python = os.path.join(venv, "bin", "python")
    code = "import json, importlib.metadata as m, ray.rllib, torch; print(json.dumps({p: m.version(p) for p in ('ray', 'torch')}))"

    def versions() -> dict[str, str] | None:
        if not os.path.exists(python):
            return None
        done = subprocess.run([python, "-c", code], capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None

    found, ray_version = versions(), version("ray")
    if found is None or found["ray"] != ray_version:
        print(f"making RLlib's virtual environment in {venv} (ray[rllib] {ray_version}, torch {TORCH_VERSION} CPU)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        pip = [python, "-m", "pip", "install", "-q"]
        # torch first, so that pip does not pick a build with CUDA's packages.
        subprocess.run(pip + [f"torch=={TORCH_VERSION}"], check=True)
        subprocess.run(pip + [f"ray[rllib]=={ray_version}"], check=True)
        found = versions()
        if found is None:
            raise RuntimeError(f"RLlib's environment in {venv} does not import ray.rllib and torch")
    return python, found


def first_reach(points: list[tuple[float, ...]], target: float) -> tuple[float, ...] | None:
    """The first ``(env steps, seconds, value)`` whose value reaches ``target``."""
    return next((p for p in points if p[2] >= target), None)


def windowed(episodes: list[list[float]], iterations: list[list[float]]) -> list[tuple[float, ...]]:
    """At each iteration's end, ``(env steps, seconds, mean of the last WINDOW ended episodes)``
    (-inf until WINDOW have ended)."""
    out = []
    for steps, seconds, _ in iterations:
        ended = [r for s, r in episodes if s <= steps][-WINDOW:]
        out.append((steps, seconds, statistics.fmean(ended) if len(ended) == WINDOW else float("-inf")))
    return out


def run_rllib(python: str, seed: int, max_steps: int) -> dict[str, Any]:
    spec = {"seed": seed, "max_steps": max_steps, "target": TARGET, "window": WINDOW}
    done = subprocess.run(
        [python, os.path.join(HERE, "rllib_dqn_run.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    curve = windowed(out["episodes"], out["iterations"])
    reported = [tuple(i) for i in out["iterations"]]
    return dict(
        out,
        curve=curve,
        reported=reported,
        hit=first_reach(curve, TARGET),
        reported_hit=first_reach(reported, TARGET),
        steps=out["iterations"][-1][0],
        seconds=out["train_s"],
    )


def run_ours(seed: int, max_steps: int) -> dict[str, Any]:
    with open(EXAMPLE, encoding="utf-8") as f:
        example = json.load(f)
    example["set"] = {k: v for k, v in example["set"].items() if k not in EVALUATION_KEYS}
    example["stop"] = {"episode_return_mean": TARGET, "env_steps_sampled": max_steps}
    example.pop("reaches", None)
    with tempfile.TemporaryDirectory(prefix="dqn-vs-rllib-") as tmp:
        path = os.path.join(tmp, "run.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(example, f)
        argv = [sys.executable, "-m", "jaxflow.api.cli", "train", "--config", path, "--seed", str(seed)]
        argv += ["--logdir", os.path.join(tmp, "run"), "--quiet"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-3:]}
        with open(os.path.join(tmp, "run", "progress.jsonl"), encoding="utf-8") as f:
            results = [json.loads(line) for line in f]
    # jaxflow's training return is already the mean of the last 100 ended episodes; it counts
    # only once 100 have ended, as RLlib's windowed curve does.
    curve = [
        (r["env_steps_sampled"], r["time_s"], r["episode_return_mean"] if r["episodes"] >= WINDOW else float("-inf"))
        for r in results
    ]
    return {"curve": curve, "hit": first_reach(curve, TARGET), "steps": curve[-1][0], "seconds": curve[-1][1]}


def median_hit(runs: list[dict[str, Any]], key: str, index: int) -> float | None:
    """Median over the runs that reached the target of the hit's ``index`` (0: env steps, 1: seconds)."""
    hits = [r[key][index] for r in runs if r.get(key)]
    return statistics.median(hits) if hits else None


def cell(hit: tuple[float, ...] | None, run: dict[str, Any]) -> str:
    if "error" in run:
        return "error"
    return f"{hit[0]:,.0f} ({hit[1]:.0f} s)" if hit else f"missed ({run['steps']:,.0f})"


def table(runs: dict[str, list[dict[str, Any]]], seeds: list[int], max_steps: int) -> str:
    ours, rllib = runs["jaxflow"], runs["rllib"]
    lines = [
        f"# Tuned CartPole DQN, jaxflow against RLlib: env steps (training seconds) to a training return of {TARGET:g}",
        "",
        f"Training return: the mean of the last {WINDOW} ended episodes; budget {max_steps:,} env steps.",
        "",
        "| seed | jaxflow | RLlib | RLlib, as it reports (`episode_return_mean`) | env steps/s, jaxflow / RLlib |",
        "|---:|---:|---:|---:|---:|",
    ]
    for seed, o, r in zip(seeds, ours, rllib):
        speed = (
            "—"
            if "error" in o or "error" in r
            else f"{o['steps'] / o['seconds']:,.0f} / {r['steps'] / r['seconds']:,.0f}"
        )
        reported = "error" if "error" in r else cell(r["reported_hit"], r)
        lines.append(f"| {seed} | {cell(o['hit'], o)} | {cell(r['hit'], r)} | {reported} | {speed} |")
    reached = [sum(1 for x in runs[k] if x.get("hit")) for k in ("jaxflow", "rllib")]
    med = {k: (median_hit(runs[k], "hit", 0), median_hit(runs[k], "hit", 1)) for k in runs}
    steps_ratio = med["jaxflow"][0] / med["rllib"][0] if med["jaxflow"][0] and med["rllib"][0] else None
    time_ratio = med["jaxflow"][1] / med["rllib"][1] if med["jaxflow"][1] and med["rllib"][1] else None
    lines += [
        "",
        f"Reached: jaxflow {reached[0]}/{len(seeds)}, RLlib {reached[1]}/{len(seeds)}. "
        f"Medians of those that reached it: jaxflow {med['jaxflow'][0] or 0:,.0f} env steps in "
        f"{med['jaxflow'][1] or 0:.0f} s, RLlib {med['rllib'][0] or 0:,.0f} in {med['rllib'][1] or 0:.0f} s; "
        f"jaxflow / RLlib: env steps {'—' if steps_ratio is None else f'{steps_ratio:.2f}'}, "
        f"seconds {'—' if time_ratio is None else f'{time_ratio:.2f}'}.",
    ]
    return "\n".join(lines) + "\n"


def plot(path: str, runs: dict[str, list[dict[str, Any]]]) -> None:
    """Training return against env steps, one line per run; RLlib's own reported metric dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for color, (name, key) in zip(
        ("C0", "C1", "C1"), (("jaxflow", "curve"), ("rllib", "curve"), ("rllib", "reported"))
    ):
        for i, run in enumerate(runs[name]):
            points = [p for p in run.get(key, []) if p[2] > float("-inf")]
            label = (
                None if i else (f"{name}, as it reports" if key == "reported" else f"{name}, last {WINDOW} episodes")
            )
            ax.plot(
                [p[0] for p in points],
                [p[2] for p in points],
                color=color,
                linestyle="--" if key == "reported" else "-",
                alpha=0.7,
                label=label,
            )
    ax.axhline(TARGET, color="grey", linewidth=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training return")
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=200_000, help="env steps per run (RLlib's example's budget)")
    parser.add_argument("--rllib-venv", default=RLLIB_VENV, help="RLlib's virtual environment (made if missing)")
    parser.add_argument("--out-dir", default=RESULTS_DIR)
    args = parser.parse_args()
    python, versions = rllib_python(args.rllib_venv)
    runs: dict[str, list[dict[str, Any]]] = {"jaxflow": [], "rllib": []}
    for i, seed in enumerate(args.seeds):
        order = ("rllib", "jaxflow") if i % 2 == 0 else ("jaxflow", "rllib")
        for name in order:
            start = time.monotonic()
            run = run_rllib(python, seed, args.max_steps) if name == "rllib" else run_ours(seed, args.max_steps)
            print(
                f"{name} seed {seed}: hit {run.get('hit')}, {time.monotonic() - start:.0f} s, {run.get('error', '')}",
                flush=True,
            )
            runs[name].append(run)
    text = table(runs, args.seeds, args.max_steps)
    report = {
        "machine": machine_info(runtime=False),
        "rllib_versions": versions,
        "args": {"seeds": args.seeds, "max_steps": args.max_steps},
        "runs": {k: [without_episodes(r) for r in v] for k, v in runs.items()},
    }
    os.makedirs(args.out_dir, exist_ok=True)
    plot(os.path.join(args.out_dir, "dqn_vs_rllib.png"), runs)
    write_report(args.out_dir, "dqn_vs_rllib", report, text)


def without_episodes(run: dict[str, Any]) -> dict[str, Any]:
    """A run for the JSON: its curves and hits, not its thousands of episodes; -inf as None."""
    out = {k: v for k, v in run.items() if k != "episodes"}
    for key in ("curve", "reported"):
        if key in out:
            out[key] = [[None if x == float("-inf") or x != x else x for x in p] for p in out[key]]
    return out


if __name__ == "__main__":
    main()
