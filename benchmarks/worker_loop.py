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
from common import fmt, logger, machine_info, parse_sets, write_report

from jaxflow import RolloutWorker, WorkerSpec, get_algorithm, make_vector_envs
from jaxflow.algorithm import build_learner

log = logger("worker_loop")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FRAME_SKIP = 4
# Config fields this script sets from its own flags.
FLAG_FIELDS = {"env": "--env", "num_envs_per_worker": "--envs", "num_cpus_per_worker": "--threads", "seed": "--seed",
               "vector_env": "(always ale)", "num_workers": "(always 1)"}


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
        sample_s, env_s, policy_s = sample_s + batch.timing.sample_s, env_s + batch.timing.env_s, policy_s + batch.timing.policy_s
    wall = time.perf_counter() - start
    return FRAME_SKIP * steps / wall, env_s / sample_s, policy_s / sample_s


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = get_algorithm(args.algo)
    config = spec.config_cls(env=args.env, vector_env="ale", num_workers=1, num_envs_per_worker=args.envs,
                             num_cpus_per_worker=args.threads, seed=args.seed, **args.overrides)
    network, learner = build_learner(config, spec)
    worker = RolloutWorker(WorkerSpec(config, network, spec.postprocess, None, spec.encode, spec.explore), 0)
    worker.set_weights(learner.get_weights(), 0)
    worker.sample()  # compiles
    raw_env = make_vector_envs(config, args.seed + 999, num_groups=1)[0]
    raw_env.reset()
    if args.policy == "free":
        # Swapped on purpose: the forward pass's outputs are logits and the value.
        worker._forward = free_forward(int(raw_env.action_space.n) + 1, args.latency_ms / 1e3)
    rng = np.random.default_rng(args.seed)
    repeats = []
    try:
        for i in range(args.repeats):
            raw = raw_frames_per_s(raw_env, args.raw_seconds, rng)
            frames, env_share, policy_share = worker_frames_per_s(worker, args.fragments)
            repeats.append(dict(raw_frames_per_s=raw, worker_frames_per_s=frames, worker_of_raw=frames / raw,
                                env_share=env_share, policy_share=policy_share))
            log(f"repeat {i + 1}/{args.repeats}: raw {raw:,.0f}, worker {frames:,.0f} frames/s ({frames / raw:.0%})")
            # A sample_async thread is a fragment ahead: let it finish before the raw phase.
            time.sleep(2.0 * args.envs * config.rollout_fragment_length * FRAME_SKIP / frames)
    finally:
        worker.close()
        raw_env.close()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in repeats)

    return dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"), machine=machine_info(),
        settings=dict(algo=args.algo, env=args.env, envs=args.envs, threads=args.threads, fragments=args.fragments,
                      raw_seconds=args.raw_seconds, policy=args.policy, latency_ms=args.latency_ms,
                      overrides=args.overrides, fragment_length=config.rollout_fragment_length),
        repeats=repeats,
        median=dict(raw_frames_per_s=med("raw_frames_per_s"), worker_frames_per_s=med("worker_frames_per_s"),
                    worker_of_raw=med("worker_of_raw"), env_share=med("env_share"), policy_share=med("policy_share")),
    )


def markdown(report: dict[str, Any]) -> str:
    s, m = report["settings"], report["median"]
    policy = "network" if s["policy"] == "network" else f"free ({s['latency_ms']:g} ms latency)"
    overrides = ", ".join(f"{k}={v}" for k, v in s["overrides"].items()) or "defaults"
    lines = [
        f"# One {s['algo']} rollout worker against raw ALE ({s['env']}, {s['envs']} envs, {s['threads']} emulator threads)",
        "",
        f"Policy: {policy}; config: {overrides}; {len(report['repeats'])} repeats of {s['raw_seconds']:g} s raw "
        f"then {s['fragments']} fragments of {s['fragment_length']} steps; {report['machine']['cpu_count']} CPUs "
        f"({report['machine']['cpu_model']}), {report['machine']['jax_backend']}.",
        "",
        "| repeat | raw ALE frames/s | worker frames/s | worker / raw | env share | policy share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows = [(str(i + 1), r) for i, r in enumerate(report["repeats"])] + [("**median**", m)]
    for name, r in rows:
        lines.append(f"| {name} | {r['raw_frames_per_s']:,.0f} | {r['worker_frames_per_s']:,.0f} | "
                     f"{fmt(r['worker_of_raw'], '.0%')} | {r['env_share']:.0%} | {r['policy_share']:.0%} |")
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
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field, e.g. num_env_groups=2 or sample_async=true; repeatable")
    args = p.parse_args(argv)
    args.overrides = parse_sets(p, get_algorithm(args.algo).config_cls, args.set, FLAG_FIELDS)
    if args.latency_ms and args.policy != "free":
        p.error("--latency-ms goes with --policy free")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = run(args)
    write_report(args.out_dir, "worker_loop", report, markdown(report))


if __name__ == "__main__":
    main()
