"""PPO on CartPole-v1: env-step throughput and time to a target return for several
worker counts, and the cost of the dataflow layer against a hand-written loop.

Writes ``benchmarks/results/ppo_cartpole.json`` and ``.md`` and prints the Markdown
report. Command lines: see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import ray
from common import (
    argument_parser,
    fmt,
    logger,
    machine_info,
    median_of_measured,
    median_of_reached,
    run_to_target,
    without,
    write_report,
)

from jaxflow import Algorithm, get_algorithm
from jaxflow.config import to_json_dict
from jaxflow.config.constants import ENV_STEPS_SAMPLED
from jaxflow.learn.learner import Learner
from jaxflow.rollout.batch import SampleBatch, concat_batches, flatten_time_major
from jaxflow.rollout.worker_set import WorkerSet

log = logger("ppo_cartpole")

ENV = "CartPole-v1"
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Quoted from elsewhere, NOT measured by this script: RLlib PPO on the same 2-core
# machine and config. Only ratios against these are reported, labelled "(quoted)".
RLLIB_QUOTED_STEPS_PER_S = 1_300.0
RLLIB_QUOTED_TIME_TO_TARGET_S = 64.0
RLLIB_QUOTED_TARGET = 450.0


@dataclasses.dataclass
class TrainingRun:
    """One training run; a run that raised has ``error`` set and None for every measurement."""

    workers: int
    seed: int
    build_s: float | None = None
    """Algorithm construction: learner init, actor start-up, first weight sync."""
    loop_s: float | None = None
    """The ``train()`` loop alone (includes the first iteration's compilation)."""
    iterations: int | None = None
    env_steps: int | None = None
    steps_per_s: float | None = None
    steps_per_s_incl_build: float | None = None
    steady_steps_per_s: float | None = None
    """After the first iteration, whose compilation the other rates include."""
    final_return_mean: float | None = None
    time_to_target_s: float | None = None
    """From the first ``train()`` call; None if the target was not reached."""
    time_to_target_incl_build_s: float | None = None
    env_steps_at_target: int | None = None
    error: str | None = None


@dataclasses.dataclass
class WorkerSummary:
    workers: int
    runs: int
    failed_runs: int
    reached: int
    median_steps_per_s: float | None
    median_steps_per_s_incl_build: float | None
    median_steady_steps_per_s: float | None
    median_time_to_target_s: float | None
    median_time_to_target_incl_build_s: float | None
    median_env_steps_at_target: float | None
    steps_per_s_vs_rllib_quoted: float | None
    """Our median / RLlib's quoted steps/s: above 1 means faster than the quoted number."""
    time_to_target_vs_rllib_quoted: float | None
    """Our median / RLlib's quoted time: below 1 means faster. None unless the target is the quoted one."""


@dataclasses.dataclass
class Overhead:
    workers: int
    seed: int
    algorithm_objects: str
    warmup_iterations: int
    iterations_per_rep: int
    reps: int
    env_steps_per_iteration: int
    plan_s_per_iteration: list[float]
    hand_s_per_iteration: list[float]
    plan_median_s_per_iteration: float
    hand_median_s_per_iteration: float
    overhead_pct: float
    """(plan / hand - 1) * 100 on the medians."""


def train_once(workers: int, seed: int, max_steps: int, target: float) -> TrainingRun:
    """Trains until ``episode_return_mean >= target`` or ``max_steps`` env steps sampled."""
    run = run_to_target(lambda: Algorithm.build("PPO", env=ENV, num_workers=workers, seed=seed), target, max_steps)
    steps, loop = run.env_steps, run.loop_s
    first_s, first_steps = run.first_iteration
    return TrainingRun(
        workers=workers,
        seed=seed,
        build_s=run.build_s,
        loop_s=loop,
        iterations=int(run.result["training_iteration"]),
        env_steps=steps,
        steps_per_s=steps / loop,
        steps_per_s_incl_build=steps / (loop + run.build_s),
        steady_steps_per_s=(steps - first_steps) / (loop - first_s) if loop > first_s else None,
        final_return_mean=run.final_return_mean,
        time_to_target_s=run.hit[0] if run.hit else None,
        time_to_target_incl_build_s=run.hit[0] + run.build_s if run.hit else None,
        env_steps_at_target=run.hit[1] if run.hit else None,
    )


def summarize(workers: int, runs: list[TrainingRun], target: float) -> WorkerSummary:
    steps_per_s = median_of_measured([r.steps_per_s for r in runs])
    time_to_target = median_of_reached([r.time_to_target_s for r in runs])
    return WorkerSummary(
        workers=workers,
        runs=len(runs),
        failed_runs=sum(r.error is not None for r in runs),
        reached=sum(r.time_to_target_s is not None for r in runs),
        median_steps_per_s=steps_per_s,
        median_steps_per_s_incl_build=median_of_measured([r.steps_per_s_incl_build for r in runs]),
        median_steady_steps_per_s=median_of_measured([r.steady_steps_per_s for r in runs]),
        median_time_to_target_s=time_to_target,
        median_time_to_target_incl_build_s=median_of_reached([r.time_to_target_incl_build_s for r in runs]),
        median_env_steps_at_target=median_of_reached([r.env_steps_at_target for r in runs]),
        steps_per_s_vs_rllib_quoted=steps_per_s / RLLIB_QUOTED_STEPS_PER_S if steps_per_s is not None else None,
        time_to_target_vs_rllib_quoted=(
            time_to_target / RLLIB_QUOTED_TIME_TO_TARGET_S
            if time_to_target is not None and target == RLLIB_QUOTED_TARGET
            else None
        ),
    )


def hand_iteration(workers: WorkerSet, learner: Learner, train_batch_size: int) -> int:
    """PPO's plan written out without iterators or operators; returns env steps sampled."""
    local = workers.local_worker
    fragments: list[SampleBatch] = []
    steps = 0
    while steps < train_batch_size:
        if local is not None:
            fragments.append(local.sample())
        else:
            fragments += ray.get([h.run_chain.remote("sample", ()) for _, h in workers.live()])
        steps = sum(b.env_steps for b in fragments)
    batch = concat_batches(fragments)
    adv = batch.data["advantages"]
    data = dict(batch.data, advantages=((adv - adv.mean()) / (adv.std() + 1e-8)).astype(adv.dtype))
    learner.update(flatten_time_major(data))
    workers.sync_weights(learner.get_weights(), learner.version)
    return batch.env_steps


def plan_iteration(algo: Algorithm) -> int:
    before = algo.context.counters[ENV_STEPS_SAMPLED]
    algo.train()
    return int(algo.context.counters[ENV_STEPS_SAMPLED] - before)


def measure_overhead(workers: int, seed: int, warmup: int, iterations: int, reps: int) -> Overhead:
    # Two Algorithms with 2 one-CPU actors each cannot both be placed on a 2-CPU Ray,
    # so the plan and the hand loop take turns on one Algorithm's WorkerSet and Learner.
    # Between train() calls the PPO plan holds no buffered fragments or requests in
    # flight, so the hand loop can drive the same objects safely.
    algo = Algorithm.build("PPO", env=ENV, num_workers=workers, seed=seed)
    try:
        paths: dict[str, Callable[[], int]] = {
            "plan": functools.partial(plan_iteration, algo),
            "hand": functools.partial(hand_iteration, algo.workers, algo.learner, algo.config.train_batch_size),
        }
        steps = {name: [step() for _ in range(warmup)][-1] for name, step in paths.items()}
        if steps["plan"] != steps["hand"]:
            raise RuntimeError(f"plan and hand loop sample different amounts per iteration: {steps}")
        times: dict[str, list[float]] = {name: [] for name in paths}
        for rep in range(reps):
            # ABBA order cancels a linear drift (e.g. from other load) between the two paths.
            order = ["plan", "hand"] if rep % 2 == 0 else ["hand", "plan"]
            for name in order:
                t0 = time.perf_counter()
                for _ in range(iterations):
                    paths[name]()
                times[name].append((time.perf_counter() - t0) / iterations)
            log(f"overhead rep {rep + 1}/{reps}: plan {times['plan'][-1]:.4f} s/it, hand {times['hand'][-1]:.4f} s/it")
    finally:
        algo.stop()
    plan_median, hand_median = statistics.median(times["plan"]), statistics.median(times["hand"])
    return Overhead(
        workers=workers,
        seed=seed,
        algorithm_objects="One Algorithm shared: plan (algo.train()) and hand loop alternate on its WorkerSet and Learner",
        warmup_iterations=warmup,
        iterations_per_rep=iterations,
        reps=reps,
        env_steps_per_iteration=steps["plan"],
        plan_s_per_iteration=times["plan"],
        hand_s_per_iteration=times["hand"],
        plan_median_s_per_iteration=plan_median,
        hand_median_s_per_iteration=hand_median,
        overhead_pct=(plan_median / hand_median - 1.0) * 100.0,
    )


def markdown(report: dict[str, Any]) -> str:
    args, m = report["args"], report["machine"]
    target = fmt(args["target"], "g")
    lines = [
        f"# PPO on {ENV}",
        "",
        f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} · learner on {m['jax_backend']} "
        f"({m['device_kind']} x{m['num_devices']}) · jax {m['jax']} · ray {m['ray']} · Python {m['python']}",
        "",
        f"Each run: default PPO config, stops at episode_return_mean >= {target} or {args['max_steps']:,} env steps. "
        "Medians over seeds; a run that missed the target counts as slower than any that reached it.",
        "",
        "## Training runs (median over seeds)",
        "",
        f"| workers | runs | reached {target} | env steps/s (loop) | env steps/s (incl. build) | env steps/s (after 1st iter) "
        f"| time to {target} (s, loop) | time to {target} (s, incl. build) | env steps at {target} "
        f"| steps/s vs RLlib (quoted) | time to {target} vs RLlib (quoted) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report["summary"]:
        failed = f" ({s['failed_runs']} failed)" if s["failed_runs"] else ""
        lines.append(
            f"| {s['workers']} | {s['runs']}{failed} | {s['reached']}/{s['runs']} "
            f"| {fmt(s['median_steps_per_s'], ',.0f')} | {fmt(s['median_steps_per_s_incl_build'], ',.0f')} "
            f"| {fmt(s['median_steady_steps_per_s'], ',.0f')} "
            f"| {fmt(s['median_time_to_target_s'], '.1f', 'not reached')} "
            f"| {fmt(s['median_time_to_target_incl_build_s'], '.1f', 'not reached')} "
            f"| {fmt(s['median_env_steps_at_target'], ',.0f', 'not reached')} "
            f"| {fmt(s['steps_per_s_vs_rllib_quoted'], '.2f')} | {fmt(s['time_to_target_vs_rllib_quoted'], '.2f')} |"
        )
    q = report["baseline_quoted_not_measured"]
    lines += [
        "",
        f"**Baseline, NOT measured here** (quoted): {q['source']}: ~{q['env_steps_per_s']:,.0f} env steps/s, "
        f'~{q["time_to_target_s"]:.0f} s to return {q["target"]:g}. "vs RLlib (quoted)" = our median / quoted number: '
        "steps/s above 1 and time below 1 mean jaxflow is faster. The time ratio is left out unless "
        f"--target is {q['target']:g}.",
        "",
        "### Every run",
        "",
        f"| workers | seed | build (s) | loop (s) | iterations | env steps | env steps/s (loop) | env steps/s (incl. build) "
        f"| final return | time to {target} (s) | env steps at {target} | error |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['workers']} | {r['seed']} | {fmt(r['build_s'], '.1f')} | {fmt(r['loop_s'], '.1f')} | {fmt(r['iterations'], 'd')} "
            f"| {fmt(r['env_steps'], ',d')} | {fmt(r['steps_per_s'], ',.0f')} | {fmt(r['steps_per_s_incl_build'], ',.0f')} "
            f"| {fmt(r['final_return_mean'], '.1f')} | {fmt(r['time_to_target_s'], '.1f', 'not reached')} "
            f"| {fmt(r['env_steps_at_target'], ',d', 'not reached')} | {r['error'] or ''} |"
        )
    lines += ["", "## Dataflow layer overhead", ""]
    o = report["overhead"]
    if o is None:
        lines.append(f"Failed: {report['overhead_error']}")
    else:
        lines += [
            f"num_workers={o['workers']}, seed {o['seed']}, {o['env_steps_per_iteration']:,} env steps per iteration. "
            f"Per path: warm-up {o['warmup_iterations']} iterations, then {o['reps']} timed reps of "
            f"{o['iterations_per_rep']} iterations, the paths interleaved in ABBA order. {o['algorithm_objects']}.",
            "",
            "| path | median s/iteration | per rep (s/iteration) |",
            "|---|---:|---|",
            f"| plan (`algo.train()`) | {o['plan_median_s_per_iteration']:.4f} "
            f"| {', '.join(f'{x:.4f}' for x in o['plan_s_per_iteration'])} |",
            f"| hand-written loop | {o['hand_median_s_per_iteration']:.4f} "
            f"| {', '.join(f'{x:.4f}' for x in o['hand_s_per_iteration'])} |",
            "",
            f"**Overhead (plan / hand - 1): {o['overhead_pct']:+.1f}%**",
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the training runs")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="num_workers values to train with")
    p.add_argument("--max-steps", type=int, default=300_000, help="env-step budget of one training run")
    p.add_argument("--target", type=float, default=450.0, help="episode_return_mean that counts as solved")
    p.add_argument("--overhead-workers", type=int, default=2, help="num_workers of the overhead comparison")
    p.add_argument("--overhead-warmup", type=int, default=5, help="untimed iterations per path before timing")
    p.add_argument("--overhead-iterations", type=int, default=60, help="iterations per timed rep")
    p.add_argument("--overhead-reps", type=int, default=5, help="timed reps per path")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where ppo_cartpole.json and .md go")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: first seed only, 2 workers only, 2 overhead reps of 20 iterations after 2 warm-up",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.workers = args.seeds[:1], [2]
        args.overhead_warmup, args.overhead_iterations, args.overhead_reps = 2, 20, 2
    if min(args.workers + [args.overhead_workers]) < 0 or args.max_steps <= 0:
        p.error("worker counts must be >= 0 and --max-steps > 0")
    if min(args.overhead_warmup, args.overhead_iterations, args.overhead_reps) < 1:
        p.error("--overhead-warmup, --overhead-iterations and --overhead-reps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    try:
        machine = machine_info()
        runs: list[TrainingRun] = []
        for workers in args.workers:
            for seed in args.seeds:
                log(f"training: workers={workers} seed={seed}")
                try:
                    run = train_once(workers, seed, args.max_steps, args.target)
                except Exception as e:
                    traceback.print_exc()
                    run = TrainingRun(workers, seed, error=f"{type(e).__name__}: {e}")
                runs.append(run)
                log(
                    f"  {fmt(run.env_steps, ',d')} steps in {fmt(run.loop_s, '.1f')} s loop + {fmt(run.build_s, '.1f')} s "
                    f"build ({fmt(run.steps_per_s, ',.0f')} steps/s); time to {args.target:g}: "
                    f"{fmt(run.time_to_target_s, '.1f', 'not reached')}{'; ERROR ' + run.error if run.error else ''}"
                )
        log(f"overhead: {args.overhead_workers} workers, seed {args.seeds[0]}")
        overhead: Overhead | None = None
        overhead_error: str | None = None
        try:
            overhead = measure_overhead(
                args.overhead_workers, args.seeds[0], args.overhead_warmup, args.overhead_iterations, args.overhead_reps
            )
        except Exception as e:
            traceback.print_exc()
            overhead_error = f"{type(e).__name__}: {e}"
    finally:
        ray.shutdown()
    report = {
        "benchmark": "ppo_cartpole",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "machine": machine,
        # num_workers and seed vary per run (see "runs"); the rest is PPO's default config.
        "ppo_config": without(to_json_dict(get_algorithm("PPO").config_cls(env=ENV)), "seed", "rollout.num_workers"),
        "baseline_quoted_not_measured": {
            "source": "RLlib PPO on the same 2-core machine and config",
            "env_steps_per_s": RLLIB_QUOTED_STEPS_PER_S,
            "time_to_target_s": RLLIB_QUOTED_TIME_TO_TARGET_S,
            "target": RLLIB_QUOTED_TARGET,
        },
        "summary": [
            dataclasses.asdict(summarize(w, [r for r in runs if r.workers == w], args.target)) for w in args.workers
        ],
        "runs": [dataclasses.asdict(r) for r in runs],
        "overhead": dataclasses.asdict(overhead) if overhead else None,
        "overhead_error": overhead_error,
    }
    text = markdown(report)
    write_report(args.out_dir, "ppo_cartpole", report, text)


if __name__ == "__main__":
    main()
