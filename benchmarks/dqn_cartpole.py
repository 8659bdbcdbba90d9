"""DQN on CartPole-v1: wall time and env steps to a target return with the default config;
Ape-X DQN's sampled env steps/s and learner updates/s with 1 and 2 actors.

Writes ``benchmarks/results/dqn_cartpole.json`` and ``.md`` and prints the Markdown
report.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import time
import traceback
from typing import Any

import ray
from common import (
    argument_parser,
    fmt,
    logger,
    machine_info,
    median_of_measured,
    median_of_reached,
    ratio,
    run_to_target,
    without,
    write_report,
)

from jaxflow import Algorithm, get_algorithm
from jaxflow.config import to_json_dict
from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES

log = logger("dqn_cartpole")

ENV = "CartPole-v1"
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Quoted from elsewhere, NOT measured by this script: RLlib DQN on CartPole-v1 on the same
# kind of 2-core machine. Only ratios against these are reported, labelled "(quoted)".
RLLIB_QUOTED_TIME_TO_TARGET_S = 150.0
RLLIB_QUOTED_STEPS_PER_S = 220.0
RLLIB_QUOTED_TARGET = 450.0

APEX_REPLAY_SHARDS = 2


@dataclasses.dataclass
class DQNRun:
    """One DQN training run; a run that raised has ``error`` set and None for every measurement."""

    seed: int
    build_s: float | None = None
    loop_s: float | None = None
    """The ``train()`` loop alone (includes the first iteration's compilation)."""
    iterations: int | None = None
    env_steps: int | None = None
    steps_per_s: float | None = None
    """Sampled env steps / loop time."""
    final_return_mean: float | None = None
    time_to_target_s: float | None = None
    """From the first ``train()`` call; None if the target was not reached."""
    time_to_target_incl_build_s: float | None = None
    env_steps_at_target: int | None = None
    error: str | None = None


@dataclasses.dataclass
class ApexRun:
    workers: int
    seed: int
    build_s: float | None = None
    loop_s: float | None = None
    iterations: int | None = None
    env_steps: int | None = None
    steps_per_s: float | None = None
    """Sampled env steps / loop time."""
    steady_steps_per_s: float | None = None
    """After the first iteration (compilation, replay warm-up up to learning_starts)."""
    updates: int | None = None
    """Learner updates: one per replayed batch of ``replay_batch_size``."""
    updates_per_s: float | None = None
    steady_updates_per_s: float | None = None
    sgd_steps_per_s: float | None = None
    """Optimizer steps (``replay_batch_size / train_batch_size`` per update) / loop time."""
    env_steps_trained_per_s: float | None = None
    final_return_mean: float | None = None
    error: str | None = None


def nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def train_dqn(seed: int, max_steps: int, target: float) -> DQNRun:
    """Default DQN until ``episode_return_mean >= target`` or ``max_steps`` env steps sampled."""
    run = run_to_target(lambda: Algorithm.build("DQN", env=ENV, seed=seed), target, max_steps)
    return DQNRun(
        seed=seed,
        build_s=run.build_s,
        loop_s=run.loop_s,
        iterations=int(run.result["training_iteration"]),
        env_steps=run.env_steps,
        steps_per_s=run.env_steps / run.loop_s,
        final_return_mean=run.final_return_mean,
        time_to_target_s=run.hit[0] if run.hit else None,
        time_to_target_incl_build_s=run.hit[0] + run.build_s if run.hit else None,
        env_steps_at_target=run.hit[1] if run.hit else None,
    )


def train_apex(workers: int, seed: int, env_steps: int) -> ApexRun:
    """Default Ape-X (but ``num_workers`` and 2 replay shards) for ``env_steps`` sampled env steps."""
    t0 = time.perf_counter()
    algo = Algorithm.build("APEX", env=ENV, num_workers=workers, num_replay_shards=APEX_REPLAY_SHARDS, seed=seed)
    try:
        t1 = time.perf_counter()
        result: dict[str, Any] = {}
        first: tuple[float, int, int] | None = None
        while result.get(ENV_STEPS_SAMPLED, 0) < env_steps:
            result = algo.train()
            if first is None:
                first = (time.perf_counter(), int(result[ENV_STEPS_SAMPLED]), int(result[NUM_UPDATES]))
        t2 = time.perf_counter()
        sgd_steps = int(algo.learner.version)
    finally:
        algo.stop()
    steps, updates, loop = int(result[ENV_STEPS_SAMPLED]), int(result[NUM_UPDATES]), t2 - t1
    steady = t2 - first[0] if first and t2 > first[0] and result["training_iteration"] > 1 else None
    return ApexRun(
        workers=workers,
        seed=seed,
        build_s=t1 - t0,
        loop_s=loop,
        iterations=int(result["training_iteration"]),
        env_steps=steps,
        steps_per_s=steps / loop,
        steady_steps_per_s=(steps - first[1]) / steady if steady else None,
        updates=updates,
        updates_per_s=updates / loop,
        steady_updates_per_s=(updates - first[2]) / steady if steady else None,
        sgd_steps_per_s=sgd_steps / loop,
        env_steps_trained_per_s=int(result[ENV_STEPS_TRAINED]) / loop,
        final_return_mean=nan_to_none(float(result["episode_return_mean"])),
    )


def summarize_dqn(runs: list[DQNRun], target: float) -> dict[str, Any]:
    # Runs that raised are left out of every median (also of time to target).
    ok = [r for r in runs if r.error is None]
    time_loop = median_of_reached([r.time_to_target_s for r in ok])
    time_incl = median_of_reached([r.time_to_target_incl_build_s for r in ok])
    steps_per_s = median_of_measured([r.steps_per_s for r in ok])
    quoted_target = target == RLLIB_QUOTED_TARGET
    return {
        "runs": len(runs),
        "failed_runs": len(runs) - len(ok),
        "reached": sum(r.time_to_target_s is not None for r in ok),
        "median_build_s": median_of_measured([r.build_s for r in ok]),
        "median_time_to_target_s": time_loop,
        "median_time_to_target_incl_build_s": time_incl,
        "median_env_steps_at_target": median_of_reached([r.env_steps_at_target for r in ok]),
        "median_steps_per_s": steps_per_s,
        # > 1: jaxflow reaches the target that many times faster than RLlib's quoted time.
        "rllib_quoted_time_over_ours_loop": ratio(RLLIB_QUOTED_TIME_TO_TARGET_S, time_loop) if quoted_target else None,
        "rllib_quoted_time_over_ours_incl_build": ratio(RLLIB_QUOTED_TIME_TO_TARGET_S, time_incl)
        if quoted_target
        else None,
        # > 1: jaxflow samples that many times more env steps per second.
        "steps_per_s_over_rllib_quoted": ratio(steps_per_s, RLLIB_QUOTED_STEPS_PER_S),
    }


def summarize_apex(runs: list[ApexRun], workers: int) -> dict[str, Any]:
    mine = [r for r in runs if r.workers == workers]
    return {
        "workers": workers,
        "runs": len(mine),
        "failed_runs": sum(r.error is not None for r in mine),
        "median_steps_per_s": median_of_measured([r.steps_per_s for r in mine]),
        "median_steady_steps_per_s": median_of_measured([r.steady_steps_per_s for r in mine]),
        "median_updates_per_s": median_of_measured([r.updates_per_s for r in mine]),
        "median_steady_updates_per_s": median_of_measured([r.steady_updates_per_s for r in mine]),
        "median_sgd_steps_per_s": median_of_measured([r.sgd_steps_per_s for r in mine]),
        "median_env_steps_trained_per_s": median_of_measured([r.env_steps_trained_per_s for r in mine]),
    }


def markdown(report: dict[str, Any]) -> str:
    args, m = report["args"], report["machine"]
    target = fmt(args["target"], "g")
    s = report["dqn_summary"]
    q = report["baseline_quoted_not_measured"]
    dqn_failed = f" ({s['failed_runs']} failed)" if s["failed_runs"] else ""
    lines = [
        f"# DQN and Ape-X on {ENV}",
        "",
        (
            f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start "
            f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} · learner on {m['jax_backend']} "
            f"({m['device_kind']} x{m['num_devices']}) · jax {m['jax']} · ray {m['ray']} · Python {m['python']}"
        ),
        "",
        "## DQN, default config (1 rollout worker)",
        "",
        (
            f"Each run stops at episode_return_mean >= {target} or {args['max_steps']:,} env steps. Medians over seeds; "
            "a run that missed the target counts as slower than any that reached it."
        ),
        "",
        (
            f"| runs | reached {target} | build (s) | time to {target} (s, loop) | time to {target} (s, incl. build) "
            f"| env steps at {target} | sampled env steps/s | RLlib time / ours (loop) | RLlib time / ours (incl. build) "
            "| our steps/s / RLlib's |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (
            f"| {s['runs']}{dqn_failed} | {s['reached']}/{s['runs']} "
            f"| {fmt(s['median_build_s'], '.1f')} | {fmt(s['median_time_to_target_s'], '.1f', 'not reached')} "
            f"| {fmt(s['median_time_to_target_incl_build_s'], '.1f', 'not reached')} "
            f"| {fmt(s['median_env_steps_at_target'], ',.0f', 'not reached')} | {fmt(s['median_steps_per_s'], ',.0f')} "
            f"| {fmt(s['rllib_quoted_time_over_ours_loop'], '.1f')} | {fmt(s['rllib_quoted_time_over_ours_incl_build'], '.1f')} "
            f"| {fmt(s['steps_per_s_over_rllib_quoted'], '.1f')} |"
        ),
        "",
        (
            f"**Baseline, NOT measured here** (quoted): {q['source']}: ~{q['time_to_target_s']:.0f} s to return "
            f"{q['target']:g}, ~{q['env_steps_per_s']:,.0f} env steps/s sampled. Time ratios above 1 and steps/s ratios "
            f"above 1 mean jaxflow is faster; the time ratios are left out unless --target is {q['target']:g}."
        ),
        "",
        (
            "| seed | build (s) | loop (s) | iterations | env steps | env steps/s | final return "
            f"| time to {target} (s) | env steps at {target} | error |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["dqn_runs"]:
        lines.append(
            f"| {r['seed']} | {fmt(r['build_s'], '.1f')} | {fmt(r['loop_s'], '.1f')} | {fmt(r['iterations'], 'd')} "
            f"| {fmt(r['env_steps'], ',d')} | {fmt(r['steps_per_s'], ',.0f')} | {fmt(r['final_return_mean'], '.1f')} "
            f"| {fmt(r['time_to_target_s'], '.1f', 'not reached')} | {fmt(r['env_steps_at_target'], ',d', 'not reached')} "
            f"| {r['error'] or ''} |"
        )
    lines += [
        "",
        f"## Ape-X, default config but num_workers 1 or 2 and {APEX_REPLAY_SHARDS} replay shards",
        "",
        (
            f"Each run trains for {args['apex_steps']:,} sampled env steps. An update is one replayed batch of "
            f"{report['apex_config']['distributed']['replay_batch_size']} ({report['apex_config']['distributed']['replay_batch_size'] // report['apex_config']['train_batch_size']} "
            'SGD steps). "Steady" rates leave out the first iteration (compilation, filling to learning_starts).'
        ),
        "",
        (
            "| workers | runs | env steps/s | env steps/s (steady) | updates/s | updates/s (steady) | SGD steps/s "
            "| env steps trained/s |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a in report["apex_summary"]:
        failed = f" ({a['failed_runs']} failed)" if a["failed_runs"] else ""
        lines.append(
            f"| {a['workers']} | {a['runs']}{failed} | {fmt(a['median_steps_per_s'], ',.0f')} "
            f"| {fmt(a['median_steady_steps_per_s'], ',.0f')} | {fmt(a['median_updates_per_s'], ',.1f')} "
            f"| {fmt(a['median_steady_updates_per_s'], ',.1f')} | {fmt(a['median_sgd_steps_per_s'], ',.1f')} "
            f"| {fmt(a['median_env_steps_trained_per_s'], ',.0f')} |"
        )
    sc = report["apex_scaling"]
    lines += [
        "",
        (
            f"**2 workers / 1 worker**: env steps/s {fmt(sc['steps_per_s'], '.2f')} "
            f"(steady {fmt(sc['steady_steps_per_s'], '.2f')}), updates/s {fmt(sc['updates_per_s'], '.2f')} "
            f"(steady {fmt(sc['steady_updates_per_s'], '.2f')})."
        ),
        "",
        (
            "| workers | seed | build (s) | loop (s) | iterations | env steps | env steps/s | updates | updates/s "
            "| SGD steps/s | final return | error |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["apex_runs"]:
        lines.append(
            f"| {r['workers']} | {r['seed']} | {fmt(r['build_s'], '.1f')} | {fmt(r['loop_s'], '.1f')} "
            f"| {fmt(r['iterations'], 'd')} | {fmt(r['env_steps'], ',d')} | {fmt(r['steps_per_s'], ',.0f')} "
            f"| {fmt(r['updates'], ',d')} | {fmt(r['updates_per_s'], ',.1f')} | {fmt(r['sgd_steps_per_s'], ',.1f')} "
            f"| {fmt(r['final_return_mean'], '.1f')} | {r['error'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the DQN runs")
    p.add_argument("--max-steps", type=int, default=200_000, help="env-step budget of one DQN run")
    p.add_argument("--target", type=float, default=450.0, help="episode_return_mean that counts as solved")
    p.add_argument(
        "--apex-seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the Ape-X runs (per worker count)"
    )
    p.add_argument("--apex-workers", type=int, nargs="+", default=[1, 2], help="Ape-X num_workers values")
    p.add_argument("--apex-steps", type=int, default=100_000, help="env steps sampled per Ape-X run")
    p.add_argument("--skip-dqn", action="store_true", help="leave out the DQN time-to-target runs")
    p.add_argument("--skip-apex", action="store_true", help="leave out the Ape-X throughput runs")
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where dqn_cartpole.json and .md go")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: first seed only, every run stops at 20,000 env steps (target or not)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.apex_seeds = args.seeds[:1], args.apex_seeds[:1]
        args.max_steps, args.apex_steps = 20_000, 20_000
    if args.max_steps <= 0 or args.apex_steps <= 0 or min(args.apex_workers) < 1:
        p.error("--max-steps and --apex-steps must be > 0 and --apex-workers >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    try:
        machine = machine_info()
        dqn_runs: list[DQNRun] = []
        for seed in [] if args.skip_dqn else args.seeds:
            log(f"DQN: seed={seed}")
            try:
                run = train_dqn(seed, args.max_steps, args.target)
            except Exception as e:
                traceback.print_exc()
                run = DQNRun(seed, error=f"{type(e).__name__}: {e}")
            dqn_runs.append(run)
            log(
                f"  {fmt(run.env_steps, ',d')} steps in {fmt(run.loop_s, '.1f')} s loop + {fmt(run.build_s, '.1f')} s build "
                f"({fmt(run.steps_per_s, ',.0f')} steps/s); time to {args.target:g}: "
                f"{fmt(run.time_to_target_s, '.1f', 'not reached')}{'; ERROR ' + run.error if run.error else ''}"
            )
        apex_runs: list[ApexRun] = []
        # Worker counts alternate within each seed, so load drift affects both alike.
        for seed in [] if args.skip_apex else args.apex_seeds:
            for workers in args.apex_workers:
                log(f"Ape-X: workers={workers} seed={seed}")
                try:
                    arun = train_apex(workers, seed, args.apex_steps)
                except Exception as e:
                    traceback.print_exc()
                    arun = ApexRun(workers, seed, error=f"{type(e).__name__}: {e}")
                apex_runs.append(arun)
                log(
                    f"  {fmt(arun.env_steps, ',d')} steps in {fmt(arun.loop_s, '.1f')} s ({fmt(arun.steps_per_s, ',.0f')} "
                    f"steps/s, {fmt(arun.updates_per_s, ',.1f')} updates/s){'; ERROR ' + arun.error if arun.error else ''}"
                )
    finally:
        ray.shutdown()
    apex_summary = [summarize_apex(apex_runs, w) for w in args.apex_workers] if apex_runs else []
    by_workers = {a["workers"]: a for a in apex_summary}
    one, two = by_workers.get(1, {}), by_workers.get(2, {})
    report = {
        "benchmark": "dqn_cartpole",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "machine": machine,
        # seed varies per run; the rest is the default config (Ape-X: num_workers per run, 2 shards).
        "dqn_config": without(to_json_dict(get_algorithm("DQN").config_cls(env=ENV)), "seed"),
        "apex_config": without(
            to_json_dict(get_algorithm("APEX").config_cls(env=ENV, num_replay_shards=APEX_REPLAY_SHARDS)),
            "seed",
            "rollout.num_workers",
        ),
        "baseline_quoted_not_measured": {
            "source": "RLlib DQN on CartPole-v1 on the same kind of 2-core machine",
            "time_to_target_s": RLLIB_QUOTED_TIME_TO_TARGET_S,
            "env_steps_per_s": RLLIB_QUOTED_STEPS_PER_S,
            "target": RLLIB_QUOTED_TARGET,
        },
        "dqn_summary": summarize_dqn(dqn_runs, args.target),
        "dqn_runs": [dataclasses.asdict(r) for r in dqn_runs],
        "apex_summary": apex_summary,
        "apex_scaling": {  # 2 workers / 1 worker, on the medians
            key: ratio(two.get(f"median_{key}"), one.get(f"median_{key}"))
            for key in ("steps_per_s", "steady_steps_per_s", "updates_per_s", "steady_updates_per_s")
        },
        "apex_runs": [dataclasses.asdict(r) for r in apex_runs],
    }
    text = markdown(report)
    write_report(args.out_dir, "dqn_cartpole", report, text)


if __name__ == "__main__":
    main()
