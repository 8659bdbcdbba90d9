"""Env steps per second of one rollout worker's vector env, stepped with random actions:
jaxflow's Python ``VectorEnv``, ale-py's ``ALEVectorEnv`` (ALE games only) and envpool's
``EnvPoolVectorEnv``, each made by ``make_vector_envs`` as a worker makes it, on the same
number of threads (``--threads``, a worker's ``num_cpus_per_worker``; Python steps in one).

Each repeat times every backend of every case for ``--seconds`` after ``--warmup`` untimed
steps, the backends taking turns in an order that rotates from repeat to repeat; the table
holds the medians. The actions are drawn before the clock starts. Writes
``results/vector_envs.json``, ``.md`` and ``.png`` and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from typing import Any

import numpy as np
from common import argument_parser, fmt, logger, machine_info, ratio, save_figure, write_report

from jaxflow import get_algorithm, make_vector_envs
from jaxflow.config import make_config

log = logger("vector_envs")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
CASES = (
    ("CartPole-v1", 16),
    ("CartPole-v1", 128),
    ("Pendulum-v1", 16),
    ("HalfCheetah-v5", 16),
    ("ALE/Pong-v5", 8),
    ("ALE/Pong-v5", 32),
)
"""(env, envs per worker): classic control, MuJoCo and Atari, a small and a large vector."""
ACTION_BATCHES = 64
"""Random action batches drawn ahead, used in turn."""


def backends(env_id: str) -> list[str]:
    """The backends that run ``env_id``: ale-py's only for the ALE games."""
    return ["python", "ale", "envpool"] if env_id.startswith("ALE/") else ["python", "envpool"]


def default_backend(env_id: str) -> str:
    """What ``vector_env="auto"`` stepped before envpool: ale-py's for the ALE games, else Python."""
    return "ale" if env_id.startswith("ALE/") else "python"


def make_venv(env_id: str, num_envs: int, backend: str, threads: int, seed: int) -> Any:
    """One worker's vector env, as ``make_vector_envs`` makes it for that config."""
    config = make_config(
        get_algorithm("PPO").config_cls,
        env=env_id,
        vector_env=backend,
        num_envs_per_worker=num_envs,
        num_cpus_per_worker=threads,
        num_workers=1,
    )
    (venv,) = make_vector_envs(config, seed)
    return venv


def steps_per_s(venv: Any, actions: list[np.ndarray], warmup: int, seconds: float) -> float:
    """Env steps per second over ``seconds`` of stepping, after ``warmup`` untimed steps."""
    for t in range(warmup):
        venv.step(actions[t % len(actions)])
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        venv.step(actions[steps % len(actions)])
        steps += 1
    return steps * venv.num_envs / elapsed


def random_actions(venv: Any, seed: int) -> list[np.ndarray]:
    space = venv.action_space
    space.seed(seed)
    return [np.stack([space.sample() for _ in range(venv.num_envs)]) for _ in range(ACTION_BATCHES)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    venvs = {
        (env_id, n, b): make_venv(env_id, n, b, args.threads, args.seed)
        for env_id, n in CASES
        for b in backends(env_id)
    }
    actions = {}
    for key, venv in venvs.items():
        venv.reset()
        actions[key] = random_actions(venv, args.seed)
    measured: dict[tuple[str, int, str], list[float]] = {key: [] for key in venvs}
    try:
        for r in range(args.repeats):
            for env_id, n in CASES:
                names = backends(env_id)
                for b in names[r % len(names) :] + names[: r % len(names)]:
                    key = (env_id, n, b)
                    measured[key].append(steps_per_s(venvs[key], actions[key], args.warmup, args.seconds))
                log(f"repeat {r + 1}/{args.repeats} {env_id} x{n}: " + ", ".join(
                    f"{b} {measured[(env_id, n, b)][-1]:,.0f}" for b in names
                ))  # fmt: skip
    finally:
        for venv in venvs.values():
            venv.close()
    rows = []
    for env_id, n in CASES:
        medians = {b: statistics.median(measured[(env_id, n, b)]) for b in backends(env_id)}
        rows.append(
            dict(
                env=env_id,
                envs=n,
                repeats={b: measured[(env_id, n, b)] for b in backends(env_id)},
                median_steps_per_s=medians,
                envpool_over_default=ratio(medians["envpool"], medians[default_backend(env_id)]),
            )
        )
    return dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        machine=machine_info(runtime=False),
        settings=dict(threads=args.threads, seconds=args.seconds, warmup=args.warmup, repeats=args.repeats),
        rows=rows,
    )


def markdown(report: dict[str, Any]) -> str:
    s, m = report["settings"], report["machine"]
    lines = [
        f"# Vector env steps/s, one worker, {s['threads']} thread(s), random actions",
        "",
        f"Medians of {s['repeats']} repeats of {s['seconds']:g} s each (after {s['warmup']} untimed steps); "
        f"{m['cpu_count']} CPUs ({m['cpu_model']}), load {m['load_average_at_start'][0]:.2f} at start.",
        "",
        "| env | envs | python | ale | envpool | envpool / current default |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        med = row["median_steps_per_s"]
        lines.append(
            f"| {row['env']} | {row['envs']} | {fmt(med.get('python'), ',.0f')} | {fmt(med.get('ale'), ',.0f')} | "
            f"{fmt(med['envpool'], ',.0f')} | {fmt(row['envpool_over_default'], '.2f')}x |"
        )
    lines += ["", "The current default is ale-py's vector env for the ALE games and Python for the rest."]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    """Grouped bars per case, one per backend, on a log scale (the rates span 100x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, names = report["rows"], ["python", "ale", "envpool"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        xs = [i + (k - 1) * width for i, row in enumerate(rows) if name in row["median_steps_per_s"]]
        ys = [row["median_steps_per_s"][name] for row in rows if name in row["median_steps_per_s"]]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(rows)), [f"{row['env']}\n{row['envs']} envs" for row in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("env steps/s (median)")
    ax.set_title(f"One worker's vector env, {report['settings']['threads']} thread(s), random actions")
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--threads", type=int, default=1, help="num_cpus_per_worker: ale-py's and envpool's threads")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed stepping per backend and repeat")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps before each timed run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=RESULTS_DIR)
    args = parser.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--threads and --repeats must be >= 1, --seconds > 0 and --warmup >= 0")
    report = run(args)
    write_report(args.out, "vector_envs", report, markdown(report))
    plot(report, os.path.join(args.out, "vector_envs.png"))


if __name__ == "__main__":
    main()
