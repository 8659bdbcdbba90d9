"""Atari throughput: what IMPALA or Ape-X sample and train per second on ALE, next to the
raw ALE frame rate of the same number of processes stepping random actions, measured in
the same run (the physical limit of this machine).

Frames are agent steps x the frame skip (4). The goals: sampled frames/s >= 90% of the
raw limit, and a learner that keeps up (trained >= 95% of sampled).

Writes ``results/atari_throughput_<algo>.json``, ``.md`` and ``.png`` and prints the report.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import statistics
import time
from typing import Any

import jax
import numpy as np
import ray
from common import fmt, logger, machine_info, parse_sets, ratio, write_report

from jaxflow import Algorithm, get_algorithm, jax_actor, make_vector_envs
from jaxflow.metrics import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES
from jaxflow.networks import forward_packed

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
        cfg = spec.config_cls(**config)
        self.venv = make_vector_envs(cfg, seed, num_groups=1)[0]
        self.obs = self.venv.reset()
        self.rng = np.random.default_rng(seed)
        self.forward = None
        if with_policy:
            network = spec.network(cfg, self.obs.shape[1:], int(self.venv.action_space.n))
            params = network.init(jax.random.PRNGKey(seed), self.obs[:1].astype(np.float32))
            self.forward = functools.partial(jax.jit(functools.partial(forward_packed, network.apply)), params)

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


def stepper_frames_per_s(args: argparse.Namespace, with_policy: bool) -> float:
    gpus = args.gpus_per_worker if with_policy else 0.0
    actors = [jax_actor(Stepper, num_gpus=gpus, num_cpus=args.cpus_per_worker).remote(args.algo, algorithm_config(args), args.seed + 1000 * i, with_policy)
              for i in range(args.workers)]
    try:
        ray.get([a.run.remote(1.0) for a in actors])  # warm up: imports, ROM loading, compilation
        steps = ray.get([a.run.remote(args.raw_seconds) for a in actors])
    finally:
        for a in actors:
            ray.kill(a)
    return FRAME_SKIP * sum(steps) / args.raw_seconds


# Config fields this script sets from its own flags (the steppers follow the flags too).
FLAG_FIELDS = {"env": "--env", "num_workers": "--workers", "num_envs_per_worker": "--envs-per-worker", "seed": "--seed",
               "vector_env": "--vector-env", "num_cpus_per_worker": "--cpus-per-worker",
               "num_gpus_per_worker": "--gpus-per-worker", "buffer_size": "--replay-capacity"}


def algorithm_config(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = dict(env=args.env, num_workers=args.workers, num_envs_per_worker=args.envs_per_worker,
                                  seed=args.seed, vector_env=args.vector_env, min_env_steps_per_iteration=args.envs_per_worker * args.workers * 64,
                                  num_cpus_per_worker=args.cpus_per_worker, num_gpus_per_worker=args.gpus_per_worker)
    if args.algo == "APEX":
        fields.update(frame_stack=4, buffer_size=args.replay_capacity, learning_starts=1_000)
    return {**fields, **args.overrides}


def run_algorithm(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    algo = Algorithm.build(args.algo, **algorithm_config(args))
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
        "workers_sampling": sampler_s("sample_s") / (elapsed * args.workers),
        "sampling_in_env": ratio(sampler_s("env_s"), sampler_s("sample_s")),
        "sampling_waiting_for_policy": ratio(sampler_s("policy_s"), sampler_s("sample_s")),
        "episode_return_mean": None if np.isnan(last["episode_return_mean"]) else last["episode_return_mean"],
        "iterations": len(results),
    }


def markdown(report: dict[str, Any]) -> str:
    a, m, r = report["args"], report["machine"], report["result"]
    raw, pol = report["raw_frames_per_s"], report["with_policy_frames_per_s"]
    acting = f"a {a['gpus_per_worker']:g} share of the GPU each" if a["gpus_per_worker"] else "their CPUs"
    lines = [
        f"# {a['algo']} throughput on {a['env']}",
        "",
        f"{report['time']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load {m['load_average_at_start'][0]:.2f} · "
        f"learner on {m['jax_backend']} ({m['device_kind']} x{m['num_devices']}) · {a['workers']} workers x "
        f"{a['envs_per_worker']} envs ({a['vector_env']} vector env, {a['cpus_per_worker']:g} CPU each), acting on {acting} · {a['seconds']:.0f} s after the first iteration (build {r['build_s']:.1f} s)"
        + "".join(f" · {k}={v}" for k, v in a["overrides"].items()),
        "",
        "| frames/s | value | of raw ALE limit |",
        "|---|---:|---:|",
        f"| raw ALE, {a['workers']} processes, random actions | {raw:,.0f} | 100% |",
        f"| ALE + {a['algo']}'s network acting on {acting} | {pol:,.0f} "
        f"| {fmt(ratio(pol, raw), '.0%')} |",
        f"| sampled | {r['sampled_frames_per_s']:,.0f} | {fmt(ratio(r['sampled_frames_per_s'], raw), '.0%')} |",
        f"| trained | {r['trained_frames_per_s']:,.0f} | {fmt(ratio(r['trained_frames_per_s'], raw), '.0%')} |",
        "",
        "| learner | value |",
        "|---|---:|",
        f"| trained / sampled | {fmt(ratio(r['trained_frames_per_s'], r['sampled_frames_per_s']), '.1%')} |",
        f"| updates/s | {r['updates_per_s']:.1f} |",
        f"| time waiting for data (s per s) | {r['learner_wait_s_per_s']:.2f} |",
        f"| transfers/s to device | {r['transfers_per_s']:.1f} |",
        f"| MB/s to device | {r['mb_to_device_per_s']:.1f} |",
        f"| policy lag (median, SGD steps) | {fmt(r['policy_lag_median'], '.0f')} |",
        "",
        "| workers | value |",
        "|---|---:|",
        f"| time sampling (share of wall time, mean over workers) | {fmt(r['workers_sampling'], '.0%')} |",
        f"| ... of which stepping the envs | {fmt(r['sampling_in_env'], '.0%')} |",
        f"| ... of which waiting for the policy's forward pass | {fmt(r['sampling_waiting_for_policy'], '.0%')} |",
        "",
        f"Goals: sampled >= 90% of the raw limit (median over {len(report['repeats'])} repeat(s) of each repeat's "
        f"ratio: {report['goals']['sampled_of_raw']:.0%}); trained >= 95% of sampled "
        f"({report['goals']['trained_of_sampled']:.1%}).",
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = report["result"]
    names = ["raw ALE limit", "ALE + network", "sampled", "trained"]
    values = [report["raw_frames_per_s"], report["with_policy_frames_per_s"], r["sampled_frames_per_s"], r["trained_frames_per_s"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, values, color=["#999999", "#bbbbbb", "#1f77b4", "#ff7f0e"])
    ax.axhline(0.9 * values[0], color="k", linestyle="--", linewidth=1, label="90% of raw")
    ax.set_ylabel("frames / s")
    a = report["args"]
    ax.set_title(f"{a['algo']} on {a['env']}: {a['workers']} workers x {a['envs_per_worker']} envs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=["IMPALA", "APEX"], default="IMPALA")
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--envs-per-worker", type=int, default=8)
    p.add_argument("--vector-env", choices=["python", "ale"], default="python", help="the workers' env backend")
    p.add_argument("--cpus-per-worker", type=float, default=1.0,
                   help="CPUs per worker (num_cpus_per_worker); with --vector-env ale, also its emulator threads")
    p.add_argument("--gpus-per-worker", type=float, default=0.0,
                   help="GPU share per worker: above 0 the workers' policies act on the GPU (num_gpus_per_worker)")
    p.add_argument("--seconds", type=float, default=60.0, help="wall time measured after the first iteration")
    p.add_argument("--raw-seconds", type=float, default=15.0)
    p.add_argument("--replay-capacity", type=int, default=50_000, help="Ape-X transitions over all shards")
    p.add_argument("--repeats", type=int, default=1, help="measure everything this many times; report medians")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a field of the algorithm's config (as `jaxflow train --set`), e.g. "
                        "samples_per_insert=1 for Ape-X or send_frames_once=false for IMPALA; repeatable")
    p.add_argument("--quick", action="store_true", help="smoke run: 10 s measured, 5 s raw")
    args = p.parse_args(argv)
    # Parsed and validated here, so that a typo fails before any Ray actor starts.
    config_cls = get_algorithm(args.algo).config_cls
    args.overrides = parse_sets(p, config_cls, args.set, FLAG_FIELDS)
    config_cls(**algorithm_config(args))
    if args.quick:
        args.seconds, args.raw_seconds = 10.0, 5.0
    return args


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median over repeats (None where no repeat measured the field)."""
    def med(key: str) -> Any:
        values = [r[key] for r in results if r[key] is not None]
        return statistics.median(values) if values else None

    return {key: med(key) for key in results[0]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    machine = machine_info()
    repeats = []
    # Each repeat measures the limit, the ceiling and the algorithm back to back, so that the
    # machine's drift between repeats (seen: raw ALE from 63k to 94k frames/s) hits all three.
    for i in range(args.repeats):
        log(f"repeat {i + 1}/{args.repeats}: raw ALE, {args.workers} processes x {args.envs_per_worker} envs, {args.raw_seconds:.0f} s")
        raw = stepper_frames_per_s(args, with_policy=False)
        log(f"raw ALE: {raw:,.0f} frames/s; now with {args.algo}'s network acting")
        with_policy = stepper_frames_per_s(args, with_policy=True)
        log(f"ALE + policy: {with_policy:,.0f} frames/s; now {args.algo} for {args.seconds:.0f} s")
        result = run_algorithm(args)
        repeats.append({"raw_frames_per_s": raw, "with_policy_frames_per_s": with_policy, "result": result,
                        "sampled_of_raw": ratio(result["sampled_frames_per_s"], raw),
                        "trained_of_sampled": ratio(result["trained_frames_per_s"], result["sampled_frames_per_s"])})
    report = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": vars(args),
        "machine": machine,
        "raw_frames_per_s": statistics.median(r["raw_frames_per_s"] for r in repeats),
        "with_policy_frames_per_s": statistics.median(r["with_policy_frames_per_s"] for r in repeats),
        "result": median_result([r["result"] for r in repeats]),
        "goals": {  # medians of each repeat's own ratio
            "sampled_of_raw": statistics.median(r["sampled_of_raw"] for r in repeats),
            "trained_of_sampled": statistics.median(r["trained_of_sampled"] for r in repeats),
        },
        "repeats": repeats,
    }
    name = f"atari_throughput_{args.algo.lower()}"
    write_report(args.out_dir, name, report, markdown(report))
    plot(report, os.path.join(args.out_dir, f"{name}.png"))


if __name__ == "__main__":
    main()
