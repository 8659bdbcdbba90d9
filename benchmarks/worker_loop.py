"""One rollout worker alone (no Ray, no learner) against raw ALE on the same envs and the
same emulator threads, measured in turns in one process: the share of the emulators' frame
rate that the worker's loop keeps.

``--policy network`` acts with the algorithm's network on JAX's default device (the GPU
where there is one). ``--policy free`` answers every forward pass with zeros, after
``--latency-ms`` of sleep if given (a device's latency, which leaves the CPU free): what
remains is the loop's own cost, the part of the Atari throughput goal a CPU-only machine
can measure. Writes ``results/worker_loop.json`` and ``.md`` and prints the report.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from typing import Any

import numpy as np
from common import fmt, logger, machine_info, parse_sets, parse_variants, variant_name, write_report

from jaxflow import RolloutWorker, WorkerSpec, get_algorithm, make_vector_envs
from jaxflow.api.ray_program import build_learner
from jaxflow.config import make_config

log = logger("worker_loop")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FRAME_SKIP = 4
# Config fields this script sets from its own flags.
FLAG_FIELDS = {
    "env": "--env",
    "num_envs_per_worker": "--envs",
    "num_cpus_per_worker": "--threads",
    "seed": "--seed",
    "vector_env": "(always ale)",
    "num_workers": "(always 1)",
}


def free_forward(num_outputs: int, latency_s: float):
    """A forward pass that costs no CPU: zeros ``[B, num_outputs]`` after ``latency_s``."""

    def forward(params: Any, obs: np.ndarray) -> np.ndarray:
        del params
        if latency_s:
            time.sleep(latency_s)
        return np.zeros((len(obs), num_outputs), np.float32)

    return forward


def raw_frames_per_s(venv: Any, seconds: float, rng: np.random.Generator) -> float:
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        venv.step(rng.integers(venv.action_space.n, size=venv.num_envs))
        steps += venv.num_envs
    return FRAME_SKIP * steps / (time.perf_counter() - start)


def worker_frames_per_s(worker: RolloutWorker, fragments: int) -> tuple[float, float, float]:
    """Frames/s over ``fragments`` calls after an untimed one, and the env and policy
    shares of the worker's sampling time."""
    worker.sample()  # with sample_async, the fragment stepped ahead before the clock starts
    start, sample_s, env_s, policy_s = time.perf_counter(), 0.0, 0.0, 0.0
    steps = 0
    for _ in range(fragments):
        batch = worker.sample()
        steps += batch.env_steps
        sample_s, env_s, policy_s = (
            sample_s + batch.timing.sample_s,
            env_s + batch.timing.env_s,
            policy_s + batch.timing.policy_s,
        )
    wall = time.perf_counter() - start
    return FRAME_SKIP * steps / wall, env_s / sample_s, policy_s / sample_s


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields of the base worker: this script's flags, then ``--set``."""
    return dict(
        env=args.env,
        vector_env="ale",
        num_workers=1,
        num_envs_per_worker=args.envs,
        num_cpus_per_worker=args.threads,
        seed=args.seed,
        **args.overrides,
    )


def build_worker(args: argparse.Namespace, variant: dict[str, Any], num_outputs: int) -> RolloutWorker:
    spec = get_algorithm(args.algo)
    config = make_config(spec.config_cls, **{**base_config(args), **variant})
    policy, learner = build_learner(config, spec)
    worker = RolloutWorker(
        WorkerSpec(config, policy, spec.postprocess, None, spec.workers.encode, spec.workers.explore), 0
    )
    worker.set_weights(learner.get_weights(), 0)
    worker.sample()  # compiles
    if args.policy == "free":
        # Swapped on purpose: the forward pass's outputs are logits and the value.
        worker._forward = free_forward(num_outputs, args.latency_ms / 1e3)
    return worker


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = make_config(get_algorithm(args.algo).config_cls, **base_config(args))
    raw_env = make_vector_envs(config, args.seed + 999, num_groups=1)[0]
    raw_env.reset()
    workers: list[RolloutWorker] = []
    rng = np.random.default_rng(args.seed)
    repeats = []
    try:
        for variant in args.variants:
            workers.append(build_worker(args, variant, int(raw_env.action_space.n) + 1))
        for i in range(args.repeats):
            # Each variant right after its own raw phase; the order reverses every repeat.
            order = range(len(workers)) if i % 2 == 0 else reversed(range(len(workers)))
            measured = {}
            for v in order:
                raw = raw_frames_per_s(raw_env, args.raw_seconds, rng)
                frames, env_share, policy_share = worker_frames_per_s(workers[v], args.fragments)
                measured[v] = dict(
                    raw_frames_per_s=raw,
                    worker_frames_per_s=frames,
                    worker_of_raw=frames / raw,
                    env_share=env_share,
                    policy_share=policy_share,
                )
                log(
                    f"repeat {i + 1}/{args.repeats} [{variant_name(args.variants[v])}]: raw {raw:,.0f}, "
                    f"worker {frames:,.0f} frames/s ({frames / raw:.0%})"
                )
                # A sample_async thread is a fragment ahead: let it finish before the next phase.
                time.sleep(2.0 * args.envs * workers[v].config.rollout.rollout_fragment_length * FRAME_SKIP / frames)
            repeats.append([measured[v] for v in range(len(workers))])
    finally:
        for worker in workers:
            worker.close()
        raw_env.close()

    def med(v: int, key: str) -> float:
        return statistics.median(r[v][key] for r in repeats)

    keys = ("raw_frames_per_s", "worker_frames_per_s", "worker_of_raw", "env_share", "policy_share")
    return dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        machine=machine_info(),
        settings=dict(
            algo=args.algo,
            env=args.env,
            envs=args.envs,
            threads=args.threads,
            fragments=args.fragments,
            raw_seconds=args.raw_seconds,
            policy=args.policy,
            latency_ms=args.latency_ms,
            overrides=args.overrides,
            fragment_length=config.rollout.rollout_fragment_length,
        ),
        variants=[
            dict(
                name=variant_name(variant),
                overrides=variant,
                repeats=[r[v] for r in repeats],
                median={k: med(v, k) for k in keys},
            )
            for v, variant in enumerate(args.variants)
        ],
    )


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    policy = "network" if s["policy"] == "network" else f"free ({s['latency_ms']:g} ms latency)"
    overrides = ", ".join(f"{k}={v}" for k, v in s["overrides"].items()) or "defaults"
    variants = report["variants"]
    lines = [
        f"# One {s['algo']} rollout worker against raw ALE ({s['env']}, {s['envs']} envs, {s['threads']} emulator threads)",
        "",
        f"Policy: {policy}; base config: {overrides}; {len(variants[0]['repeats'])} repeats, each variant's "
        f"{s['raw_seconds']:g} s raw then {s['fragments']} fragments of {s['fragment_length']} steps; "
        f"{report['machine']['cpu_count']} CPUs ({report['machine']['cpu_model']}), {report['machine']['jax_backend']}.",
        "",
        "| variant | repeat | raw ALE frames/s | worker frames/s | worker / raw | env share | policy share |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        rows = [(str(i + 1), r) for i, r in enumerate(v["repeats"])] + [("**median**", v["median"])]
        for name, r in rows:
            lines.append(
                f"| {v['name']} | {name} | {r['raw_frames_per_s']:,.0f} | {r['worker_frames_per_s']:,.0f} | "
                f"{fmt(r['worker_of_raw'], '.0%')} | {r['env_share']:.0%} | {r['policy_share']:.0%} |"
            )
    lines += ["", "The median ratio is the median of each repeat's own ratio (the raw rate drifts between repeats)."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=["IMPALA", "APPO", "APEX", "DQN"], default="IMPALA")
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--envs", type=int, default=128, help="num_envs_per_worker")
    p.add_argument("--threads", type=int, default=2, help="num_cpus_per_worker: the emulator threads")
    p.add_argument("--fragments", type=int, default=8, help="timed fragments per repeat")
    p.add_argument("--raw-seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policy", choices=["free", "network"], default="free")
    p.add_argument("--latency-ms", type=float, default=0.0, help="--policy free: sleep this long per forward pass")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field, e.g. num_env_groups=2 or sample_async=true; repeatable",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar='"FIELD=VALUE ..."',
        help="also measure a worker of the base config (--set) with these fields changed, in turn "
        'with it, e.g. --variant sample_async=true --variant "num_env_groups=2"; repeatable',
    )
    args = p.parse_args(argv)
    config_cls = get_algorithm(args.algo).config_cls
    args.overrides = parse_sets(p, config_cls, args.set, FLAG_FIELDS)
    args.variants = parse_variants(p, config_cls, args.variant, FLAG_FIELDS, base_config(args))
    for variant in args.variants:
        groups = make_config(config_cls, **{**base_config(args), **variant}).rollout.num_env_groups
        if groups > 1 and args.threads < (os.cpu_count() or 1):
            log(
                f"caution [{variant_name(variant)}]: {groups} groups of {args.threads} emulator threads may step at once, "
                f"on up to {groups * args.threads} of this machine's {os.cpu_count()} cores, against {args.threads} "
                "thread(s) in the raw phase; use --threads equal to the cores the worker has to itself"
            )
    if args.latency_ms and args.policy != "free":
        p.error("--latency-ms goes with --policy free")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = run(args)
    write_report(args.out_dir, "worker_loop", report, markdown(report))


if __name__ == "__main__":
    main()
