"""Device mode (Anakin) against a hand-written fully-jitted PPO, on gymnax CartPole-v1.

For each environment count and seed, two runs take turns: jaxflow's PPO in device mode
through the whole Python API (``Algorithm.build(...).train()``: the compiled call, host
metrics, ``ReportMetrics``) and ``reference_ppo.py``, the same math written by hand in one
jitted function. Each run trains until ``episode_return_mean >= --target`` and at least
``--min-calls`` compiled calls, or ``--max-steps`` env steps. Reported per setting, medians
over seeds: env steps/s after the first (compiling) call, the seconds and env steps to the
target after that call, and jaxflow / reference ratios measured in the same run. Then
MinAtar Breakout's env steps/s in device mode.

With ``--defaults``, one more row: jaxflow's PPO with no settings at all
(``Algorithm.build("PPO", env="gymnax/CartPole-v1", seed=...)``) against the reference with
PureJaxRL's own CartPole settings (``reference_ppo.PUREJAXRL_CARTPOLE``: 4 envs x 128 steps,
4 epochs x 4 minibatches, lr 2.5e-4 annealed, entropy 0.01): what a new user of each gets.

Both judge the target the same way: the mean return of the last 100 episodes.

    .venv/bin/python benchmarks/device_mode.py            # 3 seeds x envs 8/32/128
    .venv/bin/python benchmarks/device_mode.py --quick    # seed 0, 32 envs
    .venv/bin/python benchmarks/device_mode.py --env-counts --defaults --minatar-calls 0   # defaults only
    .venv/bin/python benchmarks/device_mode.py --env-counts 2048 4096 --iterations-per-call 50   # on a GPU
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference_ppo
from common import fmt, logger, machine_info, median_of_measured, median_of_reached, ratio, write_report

from jaxflow import Algorithm

log = logger("device_mode")
T = 32  # rollout_fragment_length, PPO's default and the reference's num_steps


def timed_run(step: Callable[[], tuple[int, float]], target: float, max_steps: int, min_calls: int) -> dict[str, Any]:
    """Calls ``step() -> (env steps so far, return)`` until the target is reached and
    ``min_calls`` calls are done, or ``max_steps``; times everything after the first call."""
    t0 = time.perf_counter()
    steps, ret = step()
    t1, steps_1 = time.perf_counter(), steps
    calls, hit = 1, None
    while steps < max_steps and (hit is None or calls < min_calls):
        steps, ret = step()
        calls += 1
        if hit is None and ret >= target:
            hit = (time.perf_counter() - t1, steps - steps_1)
    t2 = time.perf_counter()
    return {
        "first_call_s": t1 - t0,
        "env_steps_per_s": (steps - steps_1) / (t2 - t1),
        "seconds_to_target": hit[0] if hit else None,
        "env_steps_to_target": hit[1] + steps_1 if hit else None,
        "final_return": ret if ret == ret else None,  # NaN until an episode ends
        "calls": calls,
    }


def jaxflow_run(
    env_id: str, seed: int, target: float, max_steps: int, min_calls: int, **settings: Any
) -> dict[str, Any]:
    """jaxflow's PPO on ``env_id`` with ``settings`` (none: every default)."""
    algo = Algorithm.build("PPO", env=env_id, seed=seed, **settings)

    def step() -> tuple[int, float]:
        r = algo.train()
        return r["env_steps_sampled"], r["episode_return_mean"]

    try:
        return timed_run(step, target, max_steps, min_calls)
    finally:
        algo.stop()


def reference_run(
    num_envs: int,
    seed: int,
    k: int,
    target: float,
    max_steps: int,
    min_calls: int,
    minibatch_size: int = 256,
    num_steps: int = T,
    settings: reference_ppo.Settings = reference_ppo.JAXFLOW_PPO,
) -> dict[str, Any]:
    init_fn, train_fn = reference_ppo.make_train(
        num_envs, num_steps, k, seed, min(minibatch_size, num_envs * num_steps), settings
    )
    box = {"state": init_fn(), "steps": 0}
    window: collections.deque = collections.deque(maxlen=100)  # jaxflow's metrics_num_episodes

    def step() -> tuple[int, float]:
        box["state"], metrics = train_fn(box["state"])
        returns = np.asarray(metrics["episode_returns"]).reshape(-1)
        window.extend(returns[~np.isnan(returns)].tolist())
        box["steps"] += num_envs * num_steps * k
        return box["steps"], float(np.mean(window)) if window else float("nan")

    return timed_run(step, target, max_steps, min_calls)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in runs),
        "seconds_to_target": median_of_reached([r["seconds_to_target"] for r in runs]),
        "env_steps_to_target": median_of_reached([r["env_steps_to_target"] for r in runs]),
        "first_call_s": statistics.median(r["first_call_s"] for r in runs),
        "reached": sum(r["seconds_to_target"] is not None for r in runs),
        "runs": runs,
    }


Runner = Callable[[int], dict[str, Any]]
"""One run of a seed."""


def compare(label: str, ours: Runner, ref: Runner, seeds: list[int]) -> dict[str, Any]:
    """Both runners on every seed, taking turns (the first alternating by seed, so that a
    drift in the machine's load favours neither); their medians."""
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "ref": []}
    for seed in seeds:
        for which in ("ours", "ref") if seed % 2 == 0 else ("ref", "ours"):
            runs[which].append((ours if which == "ours" else ref)(seed))
            r = runs[which][-1]
            log(
                f"{which:4s} {label} seed {seed}: {r['env_steps_per_s']:,.0f} steps/s, "
                f"target after {fmt(r['seconds_to_target'], '.2f')} s / {r['env_steps_to_target']} steps"
            )
    return {"label": label, "jaxflow": summarize(runs["ours"]), "reference": summarize(runs["ref"])}


def row_line(row: dict[str, Any], num_seeds: int) -> str:
    j, r = row["jaxflow"], row["reference"]
    return (
        f"| {row['label']} | {j['env_steps_per_s']:,.0f} | {r['env_steps_per_s']:,.0f} "
        f"| {fmt(ratio(j['env_steps_per_s'], r['env_steps_per_s']), '.2f')} "
        f"| {fmt(j['seconds_to_target'], '.2f')} | {fmt(r['seconds_to_target'], '.2f')} "
        f"| {fmt(ratio(j['seconds_to_target'], r['seconds_to_target']), '.2f')} "
        f"| {fmt(j['env_steps_to_target'], ',.0f')} | {fmt(r['env_steps_to_target'], ',.0f')} "
        f"| {j['reached']}/{r['reached']} of {num_seeds} |"
    )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-counts", type=int, nargs="*", default=[8, 32, 128])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--iterations-per-call", type=int, default=10)
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-steps", type=int, default=500_000)
    p.add_argument("--min-calls", type=int, default=12, help="calls per run at least, so steps/s has enough samples")
    p.add_argument(
        "--minibatch-size",
        type=int,
        default=256,
        help="both PPOs' minibatch (capped at envs x steps); raise it with thousands of envs on an accelerator",
    )
    p.add_argument("--defaults", action="store_true", help="add jaxflow's defaults against PureJaxRL's settings")
    p.add_argument("--minatar-envs", type=int, default=64)
    p.add_argument("--minatar-calls", type=int, default=8, help="0: no MinAtar run")
    p.add_argument("--quick", action="store_true", help="seed 0, 32 envs, fewer MinAtar calls")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args()
    if args.quick:
        args.seeds, args.env_counts, args.minatar_calls = [0], [32], min(args.minatar_calls, 4)
    return args


def report(args: argparse.Namespace, rows: list[dict[str, Any]], minatar: list[dict[str, Any]]) -> None:
    """Writes (and prints) the report: ``device_mode.json`` and ``.md``, the rows' table and MinAtar's rate."""
    k = args.iterations_per_call
    lines = [
        "# Device mode: PPO on gymnax CartPole-v1, jaxflow vs a hand-written jitted PPO",
        "",
        f"Rows by env count: the same settings in both ({k} iterations per compiled call, {T} steps per "
        f"iteration, minibatch {args.minibatch_size}). Row `defaults`: jaxflow's PPO with no settings against "
        "the reference with PureJaxRL's own CartPole settings. Target "
        f"{args.target:g}, medians over seeds {args.seeds}; times exclude the first (compiling) call.",
        "",
        "| envs | jaxflow steps/s | reference steps/s | ratio | jaxflow s to target | reference s | ratio "
        "| jaxflow steps to target | reference steps | reached (j/r) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [row_line(row, len(args.seeds)) for row in rows]
    minatar_rate = median_of_measured([m["env_steps_per_s"] for m in minatar]) if minatar else None
    if minatar:
        lines += [
            "",
            f"MinAtar Breakout, PPO in device mode, {args.minatar_envs} envs: "
            f"{fmt(minatar_rate, ',.0f')} env steps/s (median over seeds).",
        ]
    data = {
        "machine": machine_info(runtime=True),
        "args": vars(args),
        "cartpole": rows,
        "minatar_breakout": {"num_envs": args.minatar_envs, "env_steps_per_s": minatar_rate, "runs": minatar},
    }
    write_report(args.out, "device_mode", data, "\n".join(lines) + "\n")


def main() -> None:
    args = parse_args()
    k, cartpole = args.iterations_per_call, "gymnax/CartPole-v1"
    rows = []
    for n in args.env_counts:
        mb = min(args.minibatch_size, n * T)
        ours = functools.partial(
            jaxflow_run,
            cartpole,
            target=args.target,
            max_steps=args.max_steps,
            min_calls=args.min_calls,
            num_envs=n,
            iterations_per_call=k,
            minibatch_size=mb,
        )
        ref = functools.partial(
            reference_run,
            n,
            k=k,
            target=args.target,
            max_steps=args.max_steps,
            min_calls=args.min_calls,
            minibatch_size=args.minibatch_size,
        )
        rows.append(compare(str(n), ours, ref, args.seeds))
    if args.defaults:
        purejaxrl = functools.partial(
            reference_run,
            4,
            k=k,
            target=args.target,
            max_steps=args.max_steps,
            min_calls=args.min_calls,
            minibatch_size=128,
            num_steps=128,
            settings=reference_ppo.PUREJAXRL_CARTPOLE,
        )
        defaults = functools.partial(
            jaxflow_run, cartpole, target=args.target, max_steps=args.max_steps, min_calls=args.min_calls
        )
        rows.append(compare("defaults", defaults, purejaxrl, args.seeds))

    minatar = []
    for seed in args.seeds if args.minatar_calls else []:
        run = jaxflow_run(
            "gymnax/Breakout-MinAtar",
            seed,
            float("inf"),
            args.minatar_calls * args.minatar_envs * T * k,
            args.minatar_calls,
            num_envs=args.minatar_envs,
            iterations_per_call=k,
            minibatch_size=args.minibatch_size,
        )
        minatar.append(run)
        log(f"MinAtar Breakout envs {args.minatar_envs} seed {seed}: {run['env_steps_per_s']:,.0f} steps/s")

    report(args, rows, minatar)


if __name__ == "__main__":
    main()
