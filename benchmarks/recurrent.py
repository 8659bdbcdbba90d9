"""Recurrent against feed-forward policies: env steps per second of each on the same task and
settings; R2D2's sampled and trained steps per second in Ray mode with 1 and 2 actors.

A runner is one way of training a policy on ``jaxflow/StatelessCartPole-v1``: PPO in device
mode, and PPO and IMPALA in Ray mode on ``--ray-workers`` rollout workers of ``--ray-envs``
envs each. Each trains the same config twice, with ``use_lstm`` on (an LSTM of ``--lstm-size``
units after the MLP torso of ``--hidden-sizes``) and off. A run builds the algorithm, trains
``--warmup`` untimed calls (the first compiles), then times ``--calls`` more (Ray mode:
``--ray-calls`` iterations), in wall seconds and in CPU seconds of this process plus, in Ray
mode, the rollout workers' processes (psutil, every thread: IMPALA's learner thread is in this
process). Recurrent and feed-forward runs take turns (``--repeats`` pairs, the order swapped
every pair), so a drift in the machine's load touches both alike. Reported per runner: the
median env steps/s of each and the time per env step of the recurrent policy over the
feed-forward one's (the issue's aim: at most 1.5). ``--runners`` picks runners by name.

R2D2 (Ray mode, each actor on its own replay shard, the learner thread on Ape-X's plan):
for each of ``--r2d2-actors``, ``--warmup`` untimed iterations, then ``--calls`` timed ones;
env steps sampled per second, and steps trained per second (replayed sequences times
``trace_length``: the steps the loss trains on, burn-in not counted). Writes
``results/recurrent.json``, ``.md`` and ``.png``.

    .venv/bin/python benchmarks/recurrent.py            # lstm 128, 3 pairs of runs
    .venv/bin/python benchmarks/recurrent.py --quick
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import argument_parser, cpu_clock, fmt, logger, machine_info, save_figure, write_report

from jaxflow import Algorithm

log = logger("recurrent")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
POLICIES = ("feed-forward", "recurrent")
TASK = "jaxflow/StatelessCartPole-v1"


@dataclasses.dataclass(frozen=True)
class Runner:
    """One way of training, measured with and without ``use_lstm``:
    ``measure(use_lstm, args, seed) -> (env steps, wall s, CPU s)`` of the timed part of one run."""

    name: str
    measure: Callable[[bool, Any, int], tuple[int, float, float]]


def timed(algo: Algorithm, args: Any, calls: int, clock: Callable[[], float]) -> tuple[int, float, float]:
    """``args.warmup`` untimed calls of ``algo.train()``, then ``calls`` timed ones: env steps,
    wall seconds and ``clock`` seconds of the timed ones; stops ``algo``."""
    try:
        for _ in range(args.warmup):
            algo.train()
        start = algo.train()["env_steps_sampled"]
        wall, cpu = time.perf_counter(), clock()
        for _ in range(calls):
            result = algo.train()
        wall, cpu = time.perf_counter() - wall, clock() - cpu
        return int(result["env_steps_sampled"] - start), wall, cpu
    finally:
        algo.stop()


def policy_settings(use_lstm: bool, args: Any, seed: int) -> dict[str, Any]:
    """What every runner sets alike: the task, seed, torso, LSTM and sequence length."""
    return dict(
        env=TASK, seed=seed, use_lstm=use_lstm, hidden_sizes=tuple(args.hidden_sizes),
        lstm_size=args.lstm_size, rollout_fragment_length=args.fragment,
    )  # fmt: skip


def device_ppo(use_lstm: bool, args: Any, seed: int) -> tuple[int, float, float]:
    """PPO in device mode: every compiled call is ``iterations_per_call`` rollouts and updates."""
    algo = Algorithm.build(
        "PPO", mode="device", num_envs=args.num_envs, minibatch_size=args.minibatch_size,
        iterations_per_call=args.iterations_per_call, **policy_settings(use_lstm, args, seed),
    )  # fmt: skip
    return timed(algo, args, args.calls, time.process_time)


def ray_mode(algo_name: str) -> Callable[[bool, Any, int], tuple[int, float, float]]:
    """``algo_name`` in Ray mode: each iteration one fragment from each of ``--ray-workers``
    workers (PPO: ``--ray-fragments`` of them), timed on the driver's and workers' CPU."""

    def measure(use_lstm: bool, args: Any, seed: int) -> tuple[int, float, float]:
        per_round = args.ray_workers * args.ray_envs * args.fragment
        batch = dict(train_batch_size=per_round * args.ray_fragments, minibatch_size=args.minibatch_size)
        if algo_name == "IMPALA":  # the learner's batch is one round; an iteration waits for as many steps
            batch = dict(train_batch_size=per_round, min_env_steps_per_iteration=per_round * args.ray_fragments)
        algo = Algorithm.build(
            algo_name, mode="ray", num_workers=args.ray_workers, num_envs_per_worker=args.ray_envs,
            **batch, **policy_settings(use_lstm, args, seed),
        )  # fmt: skip
        return timed(algo, args, args.ray_calls, cpu_clock([actor for _, actor in algo.workers.live()]))

    return measure


RUNNERS = [
    Runner("PPO, device mode", device_ppo),
    Runner("PPO, Ray mode", ray_mode("PPO")),
    Runner("IMPALA, Ray mode", ray_mode("IMPALA")),
]
"""What is compared (``--runners`` picks some by name)."""


def r2d2_rates(actors: int, args: Any) -> dict[str, Any]:
    """R2D2 in Ray mode with ``actors`` actors and as many shards: sampled and trained steps per wall second."""
    algo = Algorithm.build(
        "R2D2",
        env=TASK,
        mode="ray",
        num_workers=actors,
        num_replay_shards=actors,
        num_envs_per_worker=args.r2d2_envs,
        lstm_size=args.lstm_size,
        hidden_sizes=tuple(args.hidden_sizes),
        min_env_steps_per_iteration=args.r2d2_steps,
    )
    try:
        for _ in range(args.warmup):
            algo.train()
        start = algo.train()
        wall = time.perf_counter()
        for _ in range(args.calls):
            result = algo.train()
        wall = time.perf_counter() - wall
        sampled = result["env_steps_sampled"] - start["env_steps_sampled"]
        sequences = result["env_steps_trained"] - start["env_steps_trained"]  # replayed items: sequences
        trained = sequences * algo.config.trace_length
        log(f"R2D2, {actors} actor(s): {sampled / wall:,.0f} steps sampled/s, {trained / wall:,.0f} trained/s")
        return {"actors": actors, "sampled_per_s": sampled / wall, "trained_per_s": trained / wall, "wall_s": wall}
    finally:
        algo.stop()


def r2d2_table(rows: list[dict[str, Any]], args: Any) -> str:
    lines = [
        f"# R2D2 in Ray mode on {TASK}: {args.r2d2_envs} envs per actor, one shard per actor",
        "",
        "| actors | env steps sampled/s | steps trained/s |",
        "|---:|---:|---:|",
    ]
    lines += [f"| {r['actors']} | {r['sampled_per_s']:,.0f} | {r['trained_per_s']:,.0f} |" for r in rows]
    return "\n".join(lines) + "\n"


def parse_args() -> Any:
    p = argument_parser(__doc__)
    p.add_argument("--lstm-size", type=int, default=128)
    p.add_argument("--hidden-sizes", type=int, nargs="+", default=[128, 128], help="both policies' MLP torso")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--fragment", type=int, default=16, help="rollout_fragment_length (the sequence length)")
    p.add_argument("--minibatch-size", type=int, default=512)
    p.add_argument("--iterations-per-call", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1, help="untimed calls (the first compiles)")
    p.add_argument("--calls", type=int, default=5, help="timed calls per run")
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs (recurrent and feed-forward)")
    p.add_argument("--ray-workers", type=int, default=2, help="Ray mode: rollout workers")
    p.add_argument("--ray-envs", type=int, default=16, help="Ray mode: envs per worker")
    p.add_argument("--ray-fragments", type=int, default=4, help="Ray mode: fragments per worker per iteration")
    p.add_argument("--ray-calls", type=int, default=10, help="Ray mode: timed iterations per run")
    p.add_argument("--runners", nargs="+", default=[r.name for r in RUNNERS], help="which runners, by name")
    p.add_argument("--r2d2-actors", type=int, nargs="*", default=[1, 2], help="R2D2's actor counts (none: skip)")
    p.add_argument("--r2d2-envs", type=int, default=8, help="envs per R2D2 actor")
    p.add_argument("--r2d2-steps", type=int, default=2_000, help="env steps per R2D2 iteration")
    p.add_argument("--quick", action="store_true", help="1 pair, 2 timed calls")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where recurrent.json, .md and .png go")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.calls, args.ray_calls = 1, 2, 4
    return args


def measure(runner: Runner, args: Any) -> dict[str, Any]:
    """Alternating runs of one runner: each policy's per-run rates and their medians."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in POLICIES}
    for repeat in range(args.repeats):
        for name in POLICIES if repeat % 2 == 0 else POLICIES[::-1]:
            steps, wall, cpu = runner.measure(name == "recurrent", args, repeat)
            runs[name].append({"env_steps": steps, "wall_s": wall, "cpu_s": cpu})
            log(f"{runner.name}, {name}, run {repeat}: {steps / wall:,.0f} env steps/s ({steps / cpu:,.0f} per CPU s)")
    rate = {n: statistics.median(r["env_steps"] / r["wall_s"] for r in runs[n]) for n in POLICIES}
    cpu_rate = {n: statistics.median(r["env_steps"] / r["cpu_s"] for r in runs[n]) for n in POLICIES}
    return {
        "runner": runner.name,
        "env_steps_per_s": rate,
        "env_steps_per_cpu_s": cpu_rate,
        # time per step, recurrent over feed-forward: the inverse ratio of the rates
        "time_ratio": rate["feed-forward"] / rate["recurrent"],
        "cpu_time_ratio": cpu_rate["feed-forward"] / cpu_rate["recurrent"],
        "runs": runs,
    }


def table(rows: list[dict[str, Any]], args: Any) -> str:
    lines = [
        f"# Recurrent vs feed-forward policies on {TASK}: MLP torso {tuple(args.hidden_sizes)}, then (recurrent) "
        f"an LSTM of {args.lstm_size}; {args.fragment}-step sequences; device mode {args.num_envs} envs, "
        f"Ray mode {args.ray_workers} workers of {args.ray_envs} envs",
        "",
        "| runner | feed-forward steps/s | recurrent steps/s | time per step, recurrent / feed-forward "
        "| feed-forward steps per CPU s | recurrent steps per CPU s | CPU time ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        rate, cpu = row["env_steps_per_s"], row["env_steps_per_cpu_s"]
        lines.append(
            f"| {row['runner']} | {rate['feed-forward']:,.0f} | {rate['recurrent']:,.0f} "
            f"| {fmt(row['time_ratio'], '.2f')} | {cpu['feed-forward']:,.0f} | {cpu['recurrent']:,.0f} "
            f"| {fmt(row['cpu_time_ratio'], '.2f')} |"
        )
    lines += [
        "",
        f"Medians of {args.repeats} alternating runs each; aim: a time ratio of at most 1.5. CPU seconds: "
        "this process's in device mode; in Ray mode also the rollout workers' processes.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    machine = machine_info()
    rows = [measure(runner, args) for runner in RUNNERS if runner.name in args.runners]
    r2d2 = [r2d2_rates(n, args) for n in args.r2d2_actors]
    report = {"args": vars(args), "machine": machine, "runners": rows, "r2d2": r2d2}
    report["load_average_at_end"] = list(os.getloadavg())
    write_report(args.out_dir, "recurrent", report, table(rows, args) + ("\n" + r2d2_table(r2d2, args) if r2d2 else ""))
    save_figure(_figure(rows), os.path.join(args.out_dir, "recurrent.png"))


def _figure(rows: list[dict[str, Any]]) -> Any:
    """Each runner's rates of both policies: per wall second, and per CPU second of this
    process and, in Ray mode, its workers (which moves less with other processes' load)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    width = 0.38
    for ax, key, label in zip(axes, ("env_steps_per_s", "env_steps_per_cpu_s"), ("wall", "CPU"), strict=True):
        for i, name in enumerate(POLICIES):
            xs = [j + (i - 0.5) * width for j in range(len(rows))]
            ax.bar(xs, [row[key][name] for row in rows], width, label=name)
        ax.set_xticks(range(len(rows)), [row["runner"] for row in rows])
        ax.set_ylabel(f"env steps per {label} second")
        ax.margins(y=0.2)  # room above the bars for the legend
    axes[0].set_title("Recurrent vs feed-forward (medians)")
    axes[1].legend(loc="upper right", ncol=2)
    return fig


if __name__ == "__main__":
    main()
