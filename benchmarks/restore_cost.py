"""Where a stop and a restore spend their time: for PPO (2 rollout workers) and Ape-X (2 workers,
2 replay shards) on CartPole-v1, the wall and CPU seconds of a fresh run's start (construction
and first ``train()``), then of ``save`` + ``stop()``, ``Algorithm.restore`` and the first
``train()`` after it, in one driver process (as the chaos run's interrupt does), and of a
rollout worker's restart after ``ray.kill`` (``on_worker_failure="restart"``) up to its first sample.

CPU seconds are summed over this process and every process under it (the local Ray's GCS,
raylet and worker processes), sampled by a background thread so that processes that end
within a phase are counted up to their last sample. Runs each algorithm ``--repeats`` times,
alternating, with jaxflow's XLA compilation cache off (``JAXFLOW_XLA_CACHE=off``, as before
it existed) and on (a new, empty cache directory for every run: only what that run compiled
is reused), and prints per-phase medians as Markdown. With ``--baseline CHECKOUT`` the "off"
runs import jaxflow from that checkout instead (e.g. the main branch, before this branch's changes).

    .venv/bin/python benchmarks/restore_cost.py --repeats 3
    .venv/bin/python benchmarks/restore_cost.py --repeats 3 --baseline ../main
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from typing import Any

import psutil

CONFIGS: dict[str, dict[str, Any]] = {
    "PPO": dict(env="CartPole-v1", num_workers=2, on_worker_failure="restart"),
    "APEX": dict(env="CartPole-v1", num_workers=2, num_replay_shards=2, on_worker_failure="restart"),
}
SAMPLE_EVERY_S = 0.2
PHASES = ("start", "first_train", "save_stop", "restore", "train_after", "worker_restart")


class CpuMeter:
    """CPU seconds of this process and all its descendants, dead ones up to their last sample."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, float], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _sample(self) -> None:
        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                key = (p.pid, p.create_time())
                with self._lock:
                    self.seen[key] = t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._sample()

    def total(self) -> float:
        self._sample()
        with self._lock:
            return sum(self.seen.values())


def phase(meter: CpuMeter, out: dict[str, tuple[float, float]], name: str, fn: Any) -> Any:
    w0, c0, d0 = time.perf_counter(), meter.total(), time.process_time()
    result = fn()
    out[name] = (time.perf_counter() - w0, meter.total() - c0, time.process_time() - d0)
    return result


def worker_restart(algo: Any) -> None:
    """Kills worker 1 and trains until a sample of its replacement has arrived."""
    import ray

    workers = algo.workers
    before = workers.num_restarts
    handle = dict(workers.live())[1]
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        algo.train()
        live = dict(workers.live())
        if live.get(1) is not None and live.get(1) != handle:
            ray.get(live[1].sample.remote())  # its first sample, compiled
            return
    raise RuntimeError(f"worker 1 not restarted (restarts before: {before})")


def one(algo_name: str, logdir: str) -> dict[str, tuple[float, float, float]]:
    from jaxflow import Algorithm

    meter = CpuMeter()
    out: dict[str, tuple[float, float, float]] = {}
    algo = phase(meter, out, "start", lambda: Algorithm.build(algo_name, **CONFIGS[algo_name]))
    phase(meter, out, "first_train", algo.train)
    for _ in range(2):
        algo.train()

    def save_stop() -> str:
        path = algo.save(logdir)
        algo.stop()
        return path

    path = phase(meter, out, "save_stop", save_stop)
    algo = phase(meter, out, "restore", lambda: Algorithm.restore(path))
    phase(meter, out, "train_after", algo.train)
    algo.train()
    phase(meter, out, "worker_restart", lambda: worker_restart(algo))
    algo.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--algos", nargs="+", default=list(CONFIGS))
    parser.add_argument("--baseline", help="a checkout whose jaxflow the 'off' runs import")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one run, in a process of its own
    args = parser.parse_args()
    if args.one:
        import json

        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
        with tempfile.TemporaryDirectory() as logdir:
            print("RESULT " + json.dumps(one(args.one, logdir)), flush=True)
        ray.shutdown()
        return
    import json
    import subprocess
    import sys

    results: dict[tuple[str, str], list[dict[str, list[float]]]] = {}
    loads = []
    for _ in range(args.repeats):
        for a in args.algos:
            for cache in ("off", "on"):
                with tempfile.TemporaryDirectory() as fresh:
                    env = dict(os.environ, JAXFLOW_XLA_CACHE=fresh if cache == "on" else "off")
                    env.pop("JAX_COMPILATION_CACHE_DIR", None)
                    if args.baseline and cache == "off":
                        env["PYTHONPATH"] = os.path.abspath(args.baseline)
                    cmd = [sys.executable, __file__, "--one", a]
                    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if not lines:
                    print(proc.stdout[-3000:], proc.stderr[-3000:])
                    raise SystemExit(f"{a} failed")
                results.setdefault((a, cache), []).append(json.loads(lines[0][len("RESULT ") :]))
                loads.append(os.getloadavg()[0])
                print(a, cache, results[(a, cache)][-1], flush=True)
    print(f"\n1-minute load average {min(loads):.0f}-{max(loads):.0f}; medians of {args.repeats}\n")
    print("| algo | phase | wall s off / on | CPU s (all processes) off / on | driver CPU s off / on |")
    print("|---|---|---:|---:|---:|")
    for a in args.algos:
        for name in PHASES:
            cols = [[statistics.median(r[name][i] for r in results[(a, c)]) for c in ("off", "on")] for i in range(3)]
            print(f"| {a} | {name} | " + " | ".join(f"{off:.1f} / {on:.1f}" for off, on in cols) + " |")


if __name__ == "__main__":
    main()
