"""Atari throughput: what IMPALA or Ape-X sample and train per second on ALE, next to the
raw ALE frame rate of the same number of processes stepping random actions, measured in
the same run (the physical limit of this machine).

Frames are agent steps x the frame skip (4). The goals: sampled frames/s >= 90% of the
raw limit, and a learner that keeps up (trained >= 95% of sampled).

``--variant "FIELD=VALUE ..."`` (repeatable) measures other configs in the same run, each
against its own raw measurement taken just before it, next to the base config (``--set``).
``--defaults`` makes the base config the one ``jaxflow train --algo ALGO --env ENV`` runs.

Writes ``results/atari_throughput_<algo>.json``, ``.md`` and ``.png`` and prints the report.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import ray
from common import (
    fmt,
    logger,
    machine_info,
    median_of_measured,
    parse_sets,
    parse_variants,
    ratio,
    save_figure,
    variant_name,
    write_report,
)

from jaxflow import Algorithm, get_algorithm, jax_actor, make_vector_envs
from jaxflow.config import make_config
from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES

log = logger("atari_throughput")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FRAME_SKIP = 4


class Stepper:
    """A process stepping the vector of preprocessed envs a rollout worker of ``config`` steps
    (same backend, same emulator threads): with random actions, a rollout worker's work minus
    the policy; ``with_policy``, also the algorithm's network forward pass on every step (on
    the CPU, or on the GPU in a GPU actor), the worker's work minus the dataflow: the ceiling
    of acting."""

    def __init__(self, algo: str, config: dict[str, Any], seed: int, with_policy: bool):
        spec = get_algorithm(algo)
        cfg = make_config(spec.config_cls, **config)
        self.venv = make_vector_envs(cfg, seed, num_groups=1)[0]
        self.obs = self.venv.reset()
        self.rng = np.random.default_rng(seed)
        self.forward = None
        if with_policy:
            policy = spec.policy(cfg, self.venv.observation_space, self.venv.action_space)
            params = policy.init(jax.random.PRNGKey(seed))
            self.forward = functools.partial(jax.jit(policy.forward_packed), params)

    def run(self, seconds: float) -> int:
        steps, end = 0, time.perf_counter() + seconds
        n, actions = self.venv.num_envs, self.venv.action_space.n
        while time.perf_counter() < end:
            if self.forward is None:
                a = self.rng.integers(actions, size=n)
            else:
                a = np.asarray(self.forward(self.obs))[:, :actions].argmax(axis=1)
            self.obs = self.venv.step(a).obs
            steps += n
        return steps


def stepper_frames_per_s(args: argparse.Namespace, config: dict[str, Any], with_policy: bool) -> float:
    """Frames/s of as many steppers as ``config`` has rollout workers, each with a worker's resources."""
    rollout = make_config(get_algorithm(args.algo).config_cls, **config).rollout
    gpus = rollout.num_gpus_per_worker if with_policy else 0.0
    actors = [
        jax_actor(Stepper, num_gpus=gpus, num_cpus=rollout.num_cpus_per_worker).remote(
            args.algo, config, args.seed + 1000 * i, with_policy
        )
        for i in range(rollout.num_workers)
    ]
    try:
        ray.get([a.run.remote(1.0) for a in actors])  # warm up: imports, ROM loading, compilation
        steps = ray.get([a.run.remote(args.raw_seconds) for a in actors])
    finally:
        for a in actors:
            ray.kill(a)
    return FRAME_SKIP * sum(steps) / args.raw_seconds


# Config fields this script sets from its own flags (the steppers follow the flags too).
FLAG_FIELDS = {
    "env": "--env",
    "num_workers": "--workers",
    "num_envs_per_worker": "--envs-per-worker",
    "seed": "--seed",
    "vector_env": "--vector-env",
    "num_cpus_per_worker": "--cpus-per-worker",
    "num_gpus_per_worker": "--gpus-per-worker",
    "buffer_size": "--replay-capacity",
}


def algorithm_config(args: argparse.Namespace, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config fields of a run: this script's flags, then ``--set``, then ``variant``; with
    ``--defaults``, only the env, as ``jaxflow train --algo ALGO --env ENV`` sets it, then ``variant``."""
    if args.defaults:
        return {"env": args.env, **(variant or {})}
    fields: dict[str, Any] = dict(
        env=args.env,
        num_workers=args.workers,
        num_envs_per_worker=args.envs_per_worker,
        seed=args.seed,
        vector_env=args.vector_env,
        min_env_steps_per_iteration=args.envs_per_worker * args.workers * 64,
        num_cpus_per_worker=args.cpus_per_worker,
        num_gpus_per_worker=args.gpus_per_worker,
    )
    if args.algo == "APEX":
        fields.update(frame_stack=4, buffer_size=args.replay_capacity, learning_starts=1_000)
    return {**fields, **args.overrides, **(variant or {})}


def run_algorithm(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    algo = Algorithm.build(args.algo, **config)
    workers = algo.config.rollout.num_workers
    build_s = time.perf_counter() - t0
    results = []
    try:
        first = algo.train()  # compilation and start-up are not throughput
        start, end = time.perf_counter(), time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            results.append(algo.train())
        elapsed = time.perf_counter() - start
    finally:
        algo.stop()
    last = results[-1] if results else first

    def delta(key: str) -> float:
        return float(last[key] - first[key])

    feed_last, feed_first = last.get("to_device", {}), first.get("to_device", {})
    queues_last, queues_first = last.get("queues", {}), first.get("queues", {})
    # The learner thread's wait on its input queue: time the accelerator had nothing to train on.
    waited = queues_last.get("learner_inqueue_wait_s", 0.0) - queues_first.get("learner_inqueue_wait_s", 0.0)
    lags = [r["learner"]["policy_lag"] for r in results if "policy_lag" in r.get("learner", {})]
    # The workers' own clocks: a worker not sampling waits for the plan to ask again.
    sampler_last, sampler_first = last.get("sampler", {}), first.get("sampler", {})

    def sampler_s(key: str) -> float:
        return sampler_last.get(key, 0.0) - sampler_first.get(key, 0.0)

    return {
        "build_s": build_s,
        "seconds": elapsed,
        "sampled_frames_per_s": FRAME_SKIP * delta(ENV_STEPS_SAMPLED) / elapsed,
        "trained_frames_per_s": FRAME_SKIP * delta(ENV_STEPS_TRAINED) / elapsed,
        "updates_per_s": delta(NUM_UPDATES) / elapsed,
        "learner_wait_s_per_s": waited / elapsed,
        "transfers_per_s": (feed_last.get("transfers", 0) - feed_first.get("transfers", 0)) / elapsed,
        "mb_to_device_per_s": (feed_last.get("megabytes", 0.0) - feed_first.get("megabytes", 0.0)) / elapsed,
        "policy_lag_median": statistics.median(lags) if lags else None,
        "workers_sampling": sampler_s("sample_s") / (elapsed * workers),
        "sampling_in_env": ratio(sampler_s("env_s"), sampler_s("sample_s")),
        "sampling_waiting_for_policy": ratio(sampler_s("policy_s"), sampler_s("sample_s")),
        "episode_return_mean": None if np.isnan(last["episode_return_mean"]) else last["episode_return_mean"],
        "iterations": len(results),
    }


# The report's rows: (label, how a variant's medians give the cell).
ROWS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("raw ALE limit, frames/s (random actions, measured just before)", lambda v: f"{v['raw_frames_per_s']:,.0f}"),
    ("sampled, frames/s", lambda v: f"{v['result']['sampled_frames_per_s']:,.0f}"),
    ("**sampled / raw** (goal >= 90%)", lambda v: f"**{fmt(v['goals']['sampled_of_raw'], '.0%')}**"),
    ("trained, frames/s", lambda v: f"{v['result']['trained_frames_per_s']:,.0f}"),
    ("**trained / sampled** (goal >= 95%)", lambda v: f"**{fmt(v['goals']['trained_of_sampled'], '.1%')}**"),
    (
        "sampled, against the base",
        lambda v: fmt(v["sampled_vs_base"], ".2f", "base") + ("x" if v["sampled_vs_base"] else ""),
    ),
    ("learner updates/s", lambda v: f"{v['result']['updates_per_s']:.1f}"),
    ("learner waiting for data (s per s)", lambda v: f"{v['result']['learner_wait_s_per_s']:.2f}"),
    ("transfers/s to device", lambda v: f"{v['result']['transfers_per_s']:.1f}"),
    ("MB/s to device", lambda v: f"{v['result']['mb_to_device_per_s']:.1f}"),
    ("policy lag (median, SGD steps)", lambda v: fmt(v["result"]["policy_lag_median"], ".0f")),
    ("workers sampling (share of wall time)", lambda v: fmt(v["result"]["workers_sampling"], ".0%")),
    ("... of which stepping the envs", lambda v: fmt(v["result"]["sampling_in_env"], ".0%")),
    ("... of which waiting for the forward pass", lambda v: fmt(v["result"]["sampling_waiting_for_policy"], ".0%")),
    ("build (s)", lambda v: f"{v['result']['build_s']:.1f}"),
]


def markdown(report: dict[str, Any]) -> str:
    a, m, variants = report["args"], report["machine"], report["variants"]
    pol = report["with_policy_frames_per_s"]
    acting = f"a {a['gpus_per_worker']:g} share of the GPU each" if a["gpus_per_worker"] else "their CPUs"
    raw_all = statistics.median(r["raw_frames_per_s"] for rep in report["repeats"] for r in rep["variants"])
    lines = [
        f"# {a['algo']} throughput on {a['env']}",
        "",
        f"{report['time']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load {m['load_average_at_start'][0]:.2f} · "
        f"learner on {m['jax_backend']} ({m['device_kind']} x{m['num_devices']}) · {a['workers']} workers x "
        f"{a['envs_per_worker']} envs ({a['vector_env']} vector env, {a['cpus_per_worker']:g} CPU each), acting on {acting} · "
        f"{a['seconds']:.0f} s after the first iteration, raw {a['raw_seconds']:.0f} s · medians of {len(report['repeats'])} "
        "repeat(s), ratios the median of each repeat's own ratio"
        + "".join(f" · {k}={v}" for k, v in a["overrides"].items()),
        "",
        f"ALE + {a['algo']}'s network acting on {acting} (the ceiling of acting): {pol:,.0f} frames/s, "
        f"{fmt(ratio(pol, raw_all), '.0%')} of the median raw limit ({raw_all:,.0f}).",
        "",
        "| | " + " | ".join(v["name"] for v in variants) + " |",
        "|---|" + "---:|" * len(variants),
    ]
    lines += [f"| {label} | " + " | ".join(cell(v) for v in variants) + " |" for label, cell in ROWS]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = report["variants"]
    x = np.arange(len(variants))
    fig, ax = plt.subplots(figsize=(2.5 + 1.8 * len(variants), 3.5))
    ax.bar(x - 0.3, [v["raw_frames_per_s"] for v in variants], 0.3, color="#999999", label="raw ALE limit")
    ax.bar(x, [v["result"]["sampled_frames_per_s"] for v in variants], 0.3, color="#1f77b4", label="sampled")
    ax.bar(x + 0.3, [v["result"]["trained_frames_per_s"] for v in variants], 0.3, color="#ff7f0e", label="trained")
    ax.axhline(report["with_policy_frames_per_s"], color="k", linestyle=":", linewidth=1, label="ALE + network")
    ax.set_xticks(x, [v["name"].replace(" ", "\n") for v in variants], fontsize=8)
    ax.set_ylabel("frames / s")
    a = report["args"]
    ax.set_title(f"{a['algo']} on {a['env']}: {a['workers']} workers x {a['envs_per_worker']} envs", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=["IMPALA", "APEX"], default="IMPALA")
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--envs-per-worker", type=int, default=8)
    p.add_argument("--vector-env", choices=["python", "ale"], default="python", help="the workers' env backend")
    p.add_argument(
        "--cpus-per-worker",
        type=float,
        default=1.0,
        help="CPUs per worker (num_cpus_per_worker); with --vector-env ale, also its emulator threads",
    )
    p.add_argument(
        "--gpus-per-worker",
        type=float,
        default=0.0,
        help="GPU share per worker: above 0 the workers' policies act on the GPU (num_gpus_per_worker)",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="wall time measured after the first iteration")
    p.add_argument("--raw-seconds", type=float, default=15.0)
    p.add_argument("--replay-capacity", type=int, default=50_000, help="Ape-X transitions over all shards")
    p.add_argument("--repeats", type=int, default=1, help="measure everything this many times; report medians")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of the algorithm's config (as `jaxflow train --set`), e.g. "
        "samples_per_insert=1 for Ape-X or send_frames_once=false for IMPALA; repeatable",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar='"FIELD=VALUE ..."',
        help="also measure the base config (--set) with these fields changed, in the same run, e.g. "
        '--variant sample_async=true --variant "num_env_groups=2 sample_async=true"; repeatable',
    )
    p.add_argument(
        "--defaults",
        action="store_true",
        help="the base config is what `jaxflow train --algo ALGO --env ENV` runs with no --set (its "
        "workers, envs, vector env and CPUs; the flags that set those are then ignored); --variant "
        "may change any field of it",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 10 s measured, 5 s raw")
    args = p.parse_args(argv)
    # Parsed and validated here, so that a typo fails before any Ray actor starts.
    config_cls = get_algorithm(args.algo).config_cls
    if args.defaults:
        cli_defaults(p, args)
    args.overrides = parse_sets(p, config_cls, args.set, FLAG_FIELDS)
    flags = {"env": "--env"} if args.defaults else FLAG_FIELDS
    args.variants = parse_variants(p, config_cls, args.variant, flags, algorithm_config(args))
    if args.quick:
        args.seconds, args.raw_seconds = 10.0, 5.0
    return args


def cli_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--defaults``: the config ``jaxflow train`` builds from ``--algo`` and ``--env`` alone (its
    own code), checked equal to this script's base config; the report's flags follow it."""
    from jaxflow.api.cli_args import new_run, parse

    if args.set:
        parser.error("--defaults measures the CLI's defaults: use --variant, not --set")
    _, config = new_run(parse(["train", "--algo", args.algo, "--env", args.env]))
    if make_config(type(config), env=args.env) != config:
        parser.error(f"make_config({type(config).__name__}, env={args.env!r}) differs from jaxflow train's config")
    rollout = config.rollout
    args.workers, args.envs_per_worker, args.vector_env = (
        rollout.num_workers,
        rollout.num_envs_per_worker,
        rollout.vector_env,
    )
    args.cpus_per_worker, args.gpus_per_worker = rollout.num_cpus_per_worker, rollout.num_gpus_per_worker


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median over repeats (None where no repeat measured the field)."""
    return {key: median_of_measured([r[key] for r in results]) for key in results[0]}


def measure_repeat(args: argparse.Namespace, order: list[int]) -> dict[str, Any]:
    """The ceiling of acting, then each variant in ``order``: its raw limit, then the algorithm."""
    log(f"ALE + {args.algo}'s network acting, {args.workers} processes x {args.envs_per_worker} envs")
    with_policy = stepper_frames_per_s(args, algorithm_config(args), with_policy=True)
    log(f"ALE + policy: {with_policy:,.0f} frames/s")
    measured: dict[int, dict[str, Any]] = {}
    for i in order:
        config = algorithm_config(args, args.variants[i])
        raw = stepper_frames_per_s(args, config, with_policy=False)
        log(
            f"[{variant_name(args.variants[i])}] raw ALE: {raw:,.0f} frames/s; now {args.algo} for {args.seconds:.0f} s"
        )
        result = run_algorithm(args, config)
        log(
            f"[{variant_name(args.variants[i])}] sampled {result['sampled_frames_per_s']:,.0f} frames/s "
            f"({fmt(ratio(result['sampled_frames_per_s'], raw), '.0%')} of raw)"
        )
        measured[i] = {
            "raw_frames_per_s": raw,
            "result": result,
            "sampled_of_raw": ratio(result["sampled_frames_per_s"], raw),
            "trained_of_sampled": ratio(result["trained_frames_per_s"], result["sampled_frames_per_s"]),
        }
    base = measured[0]["result"]["sampled_frames_per_s"]
    for m in measured.values():
        m["sampled_vs_base"] = ratio(m["result"]["sampled_frames_per_s"], base)
    return {
        "with_policy_frames_per_s": with_policy,
        "variants": [measured[i] for i in range(len(args.variants))],
        "load_average_at_end": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    machine = machine_info()
    repeats = []
    # Every variant is measured right after its own raw limit, so that the machine's drift
    # (seen: raw ALE from 63k to 94k frames/s between runs) hits both; the order of the
    # variants reverses from one repeat to the next, so that none is always measured first.
    for r in range(args.repeats):
        order = list(range(len(args.variants)))
        log(f"repeat {r + 1}/{args.repeats}, load average {os.getloadavg()[0]:.2f}")
        repeats.append(measure_repeat(args, order if r % 2 == 0 else order[::-1]))

    variants = []
    for i, variant in enumerate(args.variants):
        runs = [rep["variants"][i] for rep in repeats]
        variants.append(
            {
                "name": variant_name(variant),
                "overrides": variant,
                "raw_frames_per_s": median_of_measured([r["raw_frames_per_s"] for r in runs]),
                "result": median_result([r["result"] for r in runs]),
                "goals": {
                    "sampled_of_raw": median_of_measured([r["sampled_of_raw"] for r in runs]),
                    "trained_of_sampled": median_of_measured([r["trained_of_sampled"] for r in runs]),
                },
                "sampled_vs_base": None if i == 0 else median_of_measured([r["sampled_vs_base"] for r in runs]),
            }
        )
    report = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "variants"},
        "machine": machine,
        "with_policy_frames_per_s": statistics.median(r["with_policy_frames_per_s"] for r in repeats),
        "variants": variants,
        "repeats": repeats,
    }
    name = f"atari_throughput_{args.algo.lower()}"
    write_report(args.out_dir, name, report, markdown(report))
    plot(report, os.path.join(args.out_dir, f"{name}.png"))


if __name__ == "__main__":
    main()
