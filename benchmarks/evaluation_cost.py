"""Evaluation's cost to training: training env steps/s with a greedy evaluation due every
iteration (``evaluation_interval=1``) against none, in one run, for Ray mode (the evaluation
runs in an actor of its own while training goes on) and device mode (it runs
inside the compiled call).

Each repeat trains every case twice, with and without evaluation, one right after the other
(the order alternating from repeat to repeat, so the machine's drift favours neither): a fresh
``Algorithm`` each time, ``--warmup`` iterations untimed (compilation) and, with evaluation,
until the first evaluation has finished (the evaluator's start), then iterations for ``--seconds``. Reported per case: the medians of
the training env steps/s, the median of each repeat's own ratio (with / without; issue 25's aim
is a cost under 5% in Ray mode, a ratio of at least 0.95), and the evaluations finished per
timed iteration (Ray mode plays every due one, at most ``MAX_PENDING_EVALUATIONS`` behind training,
which waits for the oldest beyond that: an evaluation that outlasts an iteration slows training). Writes ``results/evaluation_cost.json``, ``.md`` and ``.png``.

    .venv/bin/python benchmarks/evaluation_cost.py --repeats 3
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from common import argument_parser, logger, machine_info, save_figure, write_report

from jaxflow import Algorithm
from jaxflow.config.constants import ENV_STEPS_SAMPLED

log = logger("evaluation_cost")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FIRST_EVALUATION_TIMEOUT_S = 180.0
AIM = 0.95
"""Issue 25: evaluation every iteration costs Ray-mode training under 5% of its env steps/s."""
CASES: dict[str, dict[str, Any]] = {
    "PPO, Ray, 2 workers": dict(algo="PPO", env="CartPole-v1", mode="ray", num_workers=2),
    "DQN, Ray, 1 worker": dict(algo="DQN", env="CartPole-v1", mode="ray"),
    "PPO, device": dict(algo="PPO", env="gymnax/CartPole-v1", mode="device"),
}


def measure(case: dict[str, Any], evaluate: bool, episodes: int, warmup: int, seconds: float) -> dict[str, Any]:
    """One fresh run of ``case``: training env steps/s over the timed iterations, and the
    evaluations that finished in them."""
    fields = dict(case, seed=0, evaluation_interval=1 if evaluate else 0, evaluation_episodes=episodes)
    algo = Algorithm.build(fields.pop("algo"), **fields)
    try:
        result = algo.train()
        deadline = time.perf_counter() + FIRST_EVALUATION_TIMEOUT_S
        # Warm: compiled, and with evaluation the evaluator started and one evaluation finished.
        while int(result["training_iteration"]) < warmup or (
            evaluate and "evaluation" not in result and time.perf_counter() < deadline
        ):
            result = algo.train()
        start_steps, start, iterations, evaluations = int(result[ENV_STEPS_SAMPLED]), time.perf_counter(), 0, 0
        while time.perf_counter() - start < seconds:
            result = algo.train()
            iterations += 1
            evaluations += len(result.get("evaluations", ()))
        elapsed = time.perf_counter() - start
    finally:
        algo.stop()
    steps = int(result[ENV_STEPS_SAMPLED]) - start_steps
    return {"env_steps_per_s": steps / elapsed, "iterations": iterations, "evaluations": evaluations}


def summarize(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians over the repeats of one case's pairs of runs."""
    without = [r["without"]["env_steps_per_s"] for r in runs]
    with_ = [r["with"]["env_steps_per_s"] for r in runs]
    per_iteration = [r["with"]["evaluations"] / max(1, r["with"]["iterations"]) for r in runs]
    return {
        "without": statistics.median(without),
        "with": statistics.median(with_),
        "ratio": statistics.median(w / wo for w, wo in zip(with_, without)),
        "ratios": [w / wo for w, wo in zip(with_, without)],
        "evaluations_per_iteration": statistics.median(per_iteration),
    }


def table(summaries: dict[str, dict[str, Any]], episodes: int) -> str:
    lines = [
        f"# Training env steps/s with a greedy evaluation ({episodes} episodes) due every iteration, and without",
        "",
        "| case | without | with | with / without (median of the repeats' ratios) | repeats' ratios "
        "| evaluations per iteration |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, s in summaries.items():
        ratios = ", ".join(f"{r:.2f}" for r in s["ratios"])
        lines.append(
            f"| {name} | {s['without']:,.0f} | {s['with']:,.0f} | {s['ratio']:.2f} | {ratios} "
            f"| {s['evaluations_per_iteration']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(path: str, summaries: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(summaries)
    ax.bar(range(len(names)), [summaries[n]["ratio"] for n in names], color="C0")
    for i, n in enumerate(names):
        ax.plot([i] * len(summaries[n]["ratios"]), summaries[n]["ratios"], "k.")
    ax.axhline(AIM, color="C3", linestyle="--", label=f"aim ({AIM:g})")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("env steps/s, with / without evaluation")
    ax.set_ylim(0, 1.1)
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=10, help="evaluation_episodes")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations of each run")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed training of each run")
    parser.add_argument("--out-dir", default=RESULTS_DIR)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name in args.cases}
    for repeat in range(args.repeats):
        for name in args.cases:
            pair: dict[str, dict[str, Any]] = {}
            for evaluate in (True, False) if repeat % 2 else (False, True):
                key = "with" if evaluate else "without"
                pair[key] = measure(CASES[name], evaluate, args.episodes, args.warmup, args.seconds)
                log(f"repeat {repeat} {name} {key}: {pair[key]}")
            runs[name].append(pair)
    summaries = {name: summarize(r) for name, r in runs.items()}
    report = {
        "cases": {name: CASES[name] for name in args.cases},
        "settings": vars(args),
        "runs": runs,
        "summaries": summaries,
        "machine": machine_info(),
    }
    write_report(args.out_dir, "evaluation_cost", report, table(summaries, args.episodes))
    plot(os.path.join(args.out_dir, "evaluation_cost.png"), summaries)


if __name__ == "__main__":
    main()
