"""Published results, reproduced: runs the rows of ``docs/results.md`` from their tuned files and
writes each row's JSON (``docs/results/<row>.json``); then rebuilds the page and its curves.

A row is a tuned example (``examples/tuned/<row>.json``) with a ``reference`` object: its table
(``family``), its seeds, the metric, and the published figure it is set beside with its source.
Each seed runs as a user's ``jaxflow train --config examples/tuned/<row>.json --seed S`` would
(one process each, ``--parallel`` at a time); a file that trains several seeds in one vmapped
device-mode call (``device.num_seeds``) runs once, every member read from that run.

The metric, as the reference measured it:
    ``training``  the mean return of the last ``metrics_num_episodes`` training episodes at the end
    ``greedy``    the mean return of ``reference.episodes`` greedy episodes of the final policy

    .venv/bin/python benchmarks/reproduce.py --row ppo-hopper            # one row, its stated seeds
    .venv/bin/python benchmarks/reproduce.py --family "PPO, MuJoCo" --parallel 2
    .venv/bin/python benchmarks/reproduce.py --page                      # only rebuild the page
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from common import argument_parser, machine_info
from results_page import RESULTS_DIR, ROOT, TUNED_DIR, reference_of, rows_with_reference, write_page

RUN_TIMEOUT_S = 4 * 3600
RUNS_DIR = os.path.join(ROOT, "benchmarks", "results", "reproduce")
"""Each seed's run directory (``<row>/seed<S>``: progress, TensorBoard, checkpoints), kept for a
look after the row is written and replaced by the row's next run."""
CURVE_POINTS = 200
"""Points kept of each seed's learning curve (evenly spaced over its iterations)."""
DEFAULT_METRIC_EPISODES = 100
"""``metrics_num_episodes``'s default: the training episodes a training return averages."""


def row_file(row: str) -> str:
    return os.path.join(TUNED_DIR, f"{row}.json")


def train_command(row: str, seed: int) -> list[str]:
    """The command a user types for one seed of ``row`` (the repository's relative path)."""
    return ["jaxflow", "train", "--config", f"examples/tuned/{row}.json", "--seed", str(seed)]


def run_seed(row: str, seed: int, logdir: str) -> dict[str, Any]:
    """One ``jaxflow train`` of the row's file with ``seed`` into ``logdir``: its wall time and its
    progress rows; a run that fails ends the script, naming the row, the seed and its last line."""
    argv = [sys.executable, "-m", "jaxflow.api.cli", *train_command(row, seed)[1:]]
    argv += ["--logdir", logdir, "--overwrite", "--quiet"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"reproduce: {row} seed {seed} failed (exit {done.returncode}): {tail[0]}")
    with open(os.path.join(logdir, "progress.jsonl"), encoding="utf-8") as f:
        return {"wall_s": wall, "progress": [json.loads(line) for line in f]}


def member_keys(progress: list[dict[str, Any]]) -> list[str | None]:
    """The members a run trained (``seed=0``, ...: a device-mode run of several), or ``[None]``."""
    return list(progress[-1].get("members", {})) or [None]


def training_return(result: dict[str, Any], member: str | None) -> float:
    """The training return a result reports, of ``member`` where a run has several."""
    value = (result if member is None else result["members"][member])["episode_return_mean"]
    return math.nan if value is None else float(value)  # NaN (null in JSON) until an episode ends


def curve(progress: list[dict[str, Any]], member: str | None) -> list[list[float]]:
    """``[env steps, training return]`` pairs, at most ``CURVE_POINTS`` of them, the last included."""
    stride = max(1, math.ceil(len(progress) / CURVE_POINTS))
    picked = progress[::stride] + ([progress[-1]] if (len(progress) - 1) % stride else [])
    points = [[int(r["env_steps_sampled"]), training_return(r, member)] for r in picked]
    return [p for p in points if not math.isnan(p[1])]


def greedy_return(logdir: str, member: str | None, episodes: int, seed: int) -> float:
    """The final policy's mean greedy return over ``episodes`` episodes (host evaluation)."""
    from jaxflow.api.algorithm import load_policy
    from jaxflow.rollout.evaluation import evaluate_policy

    index = None if member is None else int(member.rpartition("=")[2]) - seed
    config, policy, params, normalizer = load_policy(logdir, index)
    return float(evaluate_policy(config, policy, params, episodes, None, normalizer)["return_mean"])


def seed_results(row: str, seed: int, reference: dict[str, Any], logdir: str) -> list[dict[str, Any]]:
    """One process's run of the row: a result per seed it trained (one, or each vmapped member)."""
    ran = run_seed(row, seed, logdir)
    progress, members = ran["progress"], member_keys(ran["progress"])
    last = progress[-1]
    out = []
    for member in members:
        member_seed = seed if member is None else int(member.rpartition("=")[2])
        final = training_return(last, member)
        greedy = reference["metric"] == "greedy"
        out.append(
            {
                "seed": member_seed,
                "score": greedy_return(logdir, member, reference["episodes"], seed) if greedy else final,
                "final_training_return": final,
                "env_steps": int(last["env_steps_sampled"]),
                "wall_s": ran["wall_s"],
                "env_steps_per_s": int(last["env_steps_sampled"]) * len(members) / ran["wall_s"],
                "seeds_in_process": len(members),
                "curve": curve(progress, member),
            }
        )
    return out


def run_row(row: str, seeds: list[int] | None, parallel: int) -> dict[str, Any]:
    """Every seed of ``row`` (its stated seeds unless ``seeds``): the row's JSON record."""
    with open(row_file(row), encoding="utf-8") as f:
        spec = json.load(f)
    reference = reference_of(row, spec)
    processes = seeds or reference["seeds"]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    runs_dir = os.path.join(RUNS_DIR, row)
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        jobs = [pool.submit(seed_results, row, s, reference, os.path.join(runs_dir, f"seed{s}")) for s in processes]
        runs = [r for job in jobs for r in job.result()]
    scores = [r["score"] for r in runs]
    return {
        "row": row,
        "algo": spec["algo"],
        "env": spec["env"],
        "budget_env_steps": int(spec["stop"]["env_steps_sampled"]),
        "reference": reference,
        "metric_episodes": spec.get("set", {}).get("metrics_num_episodes", DEFAULT_METRIC_EPISODES),
        "seeds": [r["seed"] for r in runs],
        "mean": statistics.fmean(scores),
        "std": statistics.pstdev(scores),
        "median": statistics.median(scores),
        "runs": runs,
        "commands": [" ".join(train_command(row, s)) for s in processes],
        "parallel_processes": min(parallel, len(processes)),
        "started_utc": started,
        "commit": git_commit(),
        "machine": machine_info(runtime=False),
        "load_average_at_end": list(os.getloadavg()),
    }


def git_commit() -> str:
    """The checked-out commit, ``+changes`` where the tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=ROOT, capture_output=True, text=True)
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--row", nargs="*", default=[], help="tuned files (names) with a reference")
    parser.add_argument("--family", help="every row of this table")
    parser.add_argument("--seeds", type=int, nargs="*", help="in place of each row's stated seeds")
    parser.add_argument("--parallel", type=int, default=1, help="processes at a time (wall times then shared)")
    parser.add_argument("--page", action="store_true", help="only rebuild docs/results.md and its curves")
    args = parser.parse_args()
    known = rows_with_reference()
    rows = list(args.row) + [r for r, s in known.items() if args.family and s["family"] == args.family]
    for row in rows:
        if row not in known:
            parser.error(f"--row {row}: no examples/tuned/{row}.json with a reference; rows: {', '.join(known)}")
    if args.family and not any(s["family"] == args.family for s in known.values()):
        parser.error(f"--family {args.family!r}: none; families: {sorted({s['family'] for s in known.values()})}")
    if not rows and not args.page:
        parser.error("name --row, --family or --page")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    for row in rows:
        record = run_row(row, args.seeds, args.parallel)
        with open(os.path.join(RESULTS_DIR, f"{row}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, allow_nan=False)
        print(f"{row}: {record['mean']:.1f} ± {record['std']:.1f} over seeds {record['seeds']}", flush=True)
    write_page()


if __name__ == "__main__":
    main()
