"""PPO, IMPALA and Ape-X on a local multi-node Ray cluster (``ray.cluster_utils.Cluster``)
of 1, 2 and 3 worker nodes: sampled and trained env steps/s, and the driver's CPU time per
trained batch, with one learner in the driver (``num_learners=1``) and with a learner group
(``num_learners=2``: the workers keep the learner's rows in their object stores and the driver
passes references).

The nodes are logical: all share this machine's cores, so the figures show the plumbing's
costs per batch, not scaling. Each node gets ``--workers-per-node`` rollout workers (custom
resource ``rollout``) and, for Ape-X, one replay shard (``replay``); the head (1 CPU) holds the
driver. After ``--warmup-iterations`` (compilation, Ape-X's learning_starts), ``train()`` runs
for ``--seconds``; the driver's and each learner process's CPU time (psutil, all threads) over
that window are divided by the learner updates in it. Writes ``results/scale.json``, ``.md``
and ``.png`` and prints the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import time
import traceback
from typing import Any

import numpy as np
import psutil
import ray
from common import argument_parser, fmt, logger, machine_info, median_of_measured, save_figure, write_report
from ray.cluster_utils import Cluster

from jaxflow import Algorithm
from jaxflow.config.constants import ENV_STEPS_SAMPLED, ENV_STEPS_TRAINED, NUM_UPDATES

log = logger("scale")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENV = "CartPole-v1"
ALGOS = ("PPO", "IMPALA", "APEX")
HEAD_CPUS = 1
NODE_CPUS = 2
"""Logical CPUs per worker node: room for its workers and up to two learners at the shares below."""
CPUS_PER_ACTOR = 0.5
ATARI_OBS = (84, 84, 4)
"""A stacked Atari observation, uint8: 28,224 bytes."""
FETCH_FRAGMENT_STEPS = 256
"""IMPALA's default fragment: 32 steps of 8 envs."""
FETCH_FRAGMENTS = 16
# Ray's own start-up settings for the test clusters (as tests/conftest.py's ray_cluster).
SYSTEM_CONFIG = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}


@dataclasses.dataclass
class Run:
    """One measured window; a run that raised has ``error`` set and None for the measurements."""

    algo: str
    nodes: int
    learners: int
    repeat: int
    window_s: float | None = None
    sampled_per_s: float | None = None
    trained_per_s: float | None = None
    updates_per_s: float | None = None
    trained_per_update: float | None = None
    driver_cpu_ms_per_update: float | None = None
    """The driver process's CPU (all threads; with one learner it holds the learner too)."""
    learner_cpu_ms_per_update: float | None = None
    """Each learner process's CPU, the mean over the group's processes (None with one learner)."""
    bytes_per_update: float | None = None
    """The learner rows' bytes of one update, as ``ToDevice`` counts them (one learner only)."""
    error: str | None = None


def start_cluster(nodes: int, workers_per_node: int) -> Cluster:
    """A head with ``HEAD_CPUS`` (the driver's node) and ``nodes`` worker nodes; connects to it."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=HEAD_CPUS, include_dashboard=False, _system_config=SYSTEM_CONFIG),
    )
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=NODE_CPUS, resources={"rollout": workers_per_node, "replay": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR")
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def config(algo: str, nodes: int, learners: int, workers_per_node: int, seed: int) -> dict[str, Any]:
    """One worker per ``rollout`` slot, spread over the nodes; Ape-X: a replay shard per node."""
    fields: dict[str, Any] = dict(
        env=ENV,
        seed=seed,
        num_workers=nodes * workers_per_node,
        num_cpus_per_worker=CPUS_PER_ACTOR,
        custom_resources_per_worker={"rollout": 1},
        placement_strategy="spread",
        num_learners=learners,
        num_cpus_per_learner=CPUS_PER_ACTOR,
    )
    if algo == "APEX":
        fields.update(num_replay_shards=nodes, custom_resources_per_replay_shard={"replay": 1})
    return fields


def _pid(_actor: Any) -> int:
    return os.getpid()


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def counters(result: dict[str, Any]) -> tuple[int, int, int, int]:
    """Sampled and trained env steps, updates and ``ToDevice``'s bytes so far."""
    moved = result.get("to_device", {}).get("bytes", 0)
    return int(result[ENV_STEPS_SAMPLED]), int(result[ENV_STEPS_TRAINED]), int(result[NUM_UPDATES]), int(moved)


def measure(run: Run, algo: Algorithm, warmup: int, seconds: float) -> None:
    """Trains ``warmup`` iterations, then for ``seconds``; fills ``run``'s rates and CPU per update."""
    for _ in range(warmup):
        result = algo.train()
    group = getattr(algo.learner, "processes", [])
    learners = [psutil.Process(p) for p in ray.get([a.__ray_call__.remote(_pid) for a in group])]
    driver = psutil.Process()
    before, t0 = counters(result), time.perf_counter()
    cpu0 = [cpu_s(p) for p in [driver, *learners]]
    while time.perf_counter() - t0 < seconds:
        result = algo.train()
    after, window = counters(result), time.perf_counter() - t0
    cpu = [cpu_s(p) - c for p, c in zip([driver, *learners], cpu0)]
    sampled, trained, updates, moved = (b - a for a, b in zip(before, after))
    run.window_s, run.sampled_per_s, run.trained_per_s = window, sampled / window, trained / window
    run.updates_per_s = updates / window
    if updates:
        run.trained_per_update = trained / updates
        run.driver_cpu_ms_per_update = 1e3 * cpu[0] / updates
        run.learner_cpu_ms_per_update = 1e3 * sum(cpu[1:]) / len(learners) / updates if learners else None
        run.bytes_per_update = moved / updates if moved else None


@ray.remote(num_cpus=0, resources={"rollout": 0.01})
def atari_fragment(steps: int) -> np.ndarray:
    return np.ones((steps, *ATARI_OBS), np.uint8)


def fetch_ms_per_mb() -> float:
    """The driver's CPU per MB to get Atari-sized fragments from a worker node's object store and
    concatenate them into train batches (what it does with every fragment when it holds the learner)."""
    refs = [atari_fragment.remote(FETCH_FRAGMENT_STEPS) for _ in range(FETCH_FRAGMENTS)]
    ray.wait(refs, num_returns=len(refs), fetch_local=False)
    driver = psutil.Process()
    cpu0 = cpu_s(driver)
    total = 0
    for pair in zip(refs[::2], refs[1::2]):
        total += np.concatenate(ray.get(list(pair))).nbytes
    return 1e3 * (cpu_s(driver) - cpu0) / (total / 1e6)


def one_run(algo_name: str, nodes: int, learners: int, repeat: int, args: argparse.Namespace) -> Run:
    run = Run(algo_name, nodes, learners, repeat)
    log(f"{algo_name} nodes={nodes} learners={learners} repeat={repeat}")
    try:
        algo = Algorithm.build(algo_name, **config(algo_name, nodes, learners, args.workers_per_node, repeat))
        try:
            measure(run, algo, args.warmup_iterations, args.seconds)
        finally:
            algo.stop()
    except Exception as e:
        traceback.print_exc()
        run.error = f"{type(e).__name__}: {e}"
    log(
        f"  sampled {fmt(run.sampled_per_s, ',.0f')}/s trained {fmt(run.trained_per_s, ',.0f')}/s "
        f"driver {fmt(run.driver_cpu_ms_per_update, '.1f')} ms/update{'; ERROR ' + run.error if run.error else ''}"
    )
    return run


def runs_on(nodes: int, args: argparse.Namespace, repeat: int) -> tuple[list[Run], float]:
    """Every algorithm (and learner count) on one fresh cluster of ``nodes`` worker nodes, and
    :func:`fetch_ms_per_mb` there."""
    cluster = start_cluster(nodes, args.workers_per_node)
    address = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = cluster.address  # the learner group's processes join this Ray
    try:
        fetch = fetch_ms_per_mb()
        log(f"driver: {fetch:.2f} CPU ms per MB of Atari fragments fetched and concatenated")
        learner_counts = args.learners if nodes == args.group_nodes else [1]
        return [one_run(a, nodes, n, repeat, args) for a in args.algos for n in learner_counts], fetch
    finally:
        ray.shutdown()
        cluster.shutdown()
        if address is None:
            os.environ.pop("RAY_ADDRESS")
        else:
            os.environ["RAY_ADDRESS"] = address


MEASURED = [f.name for f in dataclasses.fields(Run) if f.name not in ("algo", "nodes", "learners", "repeat", "error")]


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    """Medians over repeats of each (algorithm, nodes, learners)."""
    keys = sorted({(r.algo, r.nodes, r.learners) for r in runs}, key=lambda k: (ALGOS.index(k[0]), k[2], k[1]))
    rows = []
    for algo, nodes, learners in keys:
        mine = [r for r in runs if (r.algo, r.nodes, r.learners) == (algo, nodes, learners)]
        ok = [r for r in mine if r.error is None]
        row: dict[str, Any] = dict(algo=algo, nodes=nodes, learners=learners, runs=len(mine))
        row["failed_runs"] = len(mine) - len(ok)
        row.update({k: median_of_measured([getattr(r, k) for r in ok]) for k in MEASURED})
        rows.append(row)
    return rows


def markdown(report: dict[str, Any]) -> str:
    m, a = report["machine"], report["args"]
    lines = [
        "# PPO, IMPALA and Ape-X on a local multi-node Ray cluster",
        "",
        f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} · jax {m['jax']} · ray {m['ray']} · {ENV}",
        "",
        f"Logical nodes sharing {m['cpu_count']} cores: plumbing costs, not scaling. {a['workers_per_node']} rollout "
        f"worker(s) per node; medians of {a['repeats']} repeat(s) of {a['seconds']} s after {a['warmup_iterations']} "
        "warm-up iterations. CPU in ms per learner update (driver: its whole process, which holds the learner "
        "when learners = 1; learner: one group process). Bytes: learner rows per update (learners = 1 only).",
        "",
        "| algo | nodes | learners | sampled steps/s | trained steps/s | updates/s | steps/update "
        "| driver CPU ms/update | learner CPU ms/update | KB/update | MB/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["summary"]:
        failed = f" ({r['failed_runs']} failed)" if r["failed_runs"] else ""
        mb_s = r["bytes_per_update"] * r["updates_per_s"] / 1e6 if r["bytes_per_update"] else None
        lines.append(
            f"| {r['algo']} | {r['nodes']} | {r['learners']}{failed} | {fmt(r['sampled_per_s'], ',.0f')} "
            f"| {fmt(r['trained_per_s'], ',.0f')} | {fmt(r['updates_per_s'], '.1f')} "
            f"| {fmt(r['trained_per_update'], ',.0f')} | {fmt(r['driver_cpu_ms_per_update'], '.1f')} "
            f"| {fmt(r['learner_cpu_ms_per_update'], '.1f')} | {fmt(r['bytes_per_update'] and r['bytes_per_update'] / 1e3, ',.0f')} "
            f"| {fmt(mb_s, '.2f')} |"
        )
    fetch = (
        f"Driver CPU to get {FETCH_FRAGMENTS} Atari-sized fragments ({FETCH_FRAGMENT_STEPS} x 84x84x4 uint8, "
        f"{FETCH_FRAGMENT_STEPS * int(np.prod(ATARI_OBS)) / 1e6:.1f} MB each) from a worker node's object store and "
        f"concatenate them in pairs: **{report['driver_fetch_ms_per_mb']:.2f} ms per MB** (median of "
        f"{len(report['driver_fetch_ms_per_mb_runs'])})."
    )
    lines += ["", fetch]
    errors = [
        f"- {r['algo']} nodes={r['nodes']} learners={r['learners']}: {r['error']}" for r in report["runs"] if r["error"]
    ]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def plot(summary: list[dict[str, Any]], path: str) -> None:
    """Sampled and trained env steps/s, and driver CPU per update, per row of the summary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['algo']}\n{r['nodes']}n {r['learners']}L" for r in summary]
    xs = range(len(summary))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, len(summary) * 0.8), 7), sharex=True)
    width = 0.4
    top.bar([x - width / 2 for x in xs], [r["sampled_per_s"] or 0 for r in summary], width, label="sampled")
    top.bar([x + width / 2 for x in xs], [r["trained_per_s"] or 0 for r in summary], width, label="trained")
    top.set_ylabel("env steps/s")
    top.legend()
    bottom.bar(list(xs), [r["driver_cpu_ms_per_update"] or 0 for r in summary], color="tab:red")
    bottom.set_ylabel("driver CPU ms / update")
    bottom.set_xticks(list(xs), labels, fontsize=8)
    fig.suptitle("Logical nodes on one machine: plumbing costs, not scaling")
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3], help="worker-node counts")
    p.add_argument("--learners", type=int, nargs="+", default=[1, 2], help="num_learners values (at --group-nodes)")
    p.add_argument("--group-nodes", type=int, help="node count with the num_learners rows (default: the largest)")
    p.add_argument("--workers-per-node", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10.0, help="timed window of one run")
    p.add_argument("--warmup-iterations", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    p.add_argument("--quick", action="store_true", help="1 and 3 nodes, 1 repeat of 4 s")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.repeats, args.seconds = [1, 3], 1, 4.0
    if min(args.nodes) < 1 or min(args.learners) < 1 or args.repeats < 1 or args.seconds <= 0:
        p.error("--nodes, --learners and --repeats must be >= 1 and --seconds > 0")
    if args.workers_per_node < 1 or args.warmup_iterations < 1:
        p.error("--workers-per-node and --warmup-iterations must be >= 1")
    args.group_nodes = args.group_nodes or max(args.nodes)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    machine = machine_info(runtime=False)
    runs: list[Run] = []
    fetches: list[float] = []
    for repeat in range(args.repeats):
        # The node counts' order reverses each repeat, so the machine's drift favours none.
        for nodes in args.nodes if repeat % 2 == 0 else args.nodes[::-1]:
            measured, fetch = runs_on(nodes, args, repeat)
            runs, fetches = runs + measured, fetches + [fetch]
    import jax

    machine.update(jax=jax.__version__, ray=ray.__version__)
    summary = summarize(runs)
    report = {
        "benchmark": "scale",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "machine": machine,
        "summary": summary,
        "driver_fetch_ms_per_mb": median_of_measured(fetches),
        "driver_fetch_ms_per_mb_runs": fetches,
        "runs": [dataclasses.asdict(r) for r in runs],
    }
    write_report(args.out_dir, "scale", report, markdown(report))
    plot(summary, os.path.join(args.out_dir, "scale.png"))


if __name__ == "__main__":
    main()
