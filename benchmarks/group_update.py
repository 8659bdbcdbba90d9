"""A PPO update (CartPole batch, several epochs of minibatches) in one learner process against
a learner group of 2 processes, the group running its minibatches three ways, measured in the
same run on the same batches:

- ``one``: one ``Learner`` in this process, on its device;
- ``group_whole``: ``num_learners=2`` with each minibatch drawn from the whole batch, which
  the learner gathers onto every device once per update, each device computing all of every
  minibatch (the default for CPUs of several processes);
- ``group_blocks``: the same group with each process drawing its part of every minibatch from
  its own rows (``jaxflow.learn.sgd.shard_blocks``; the default on accelerators): the compute
  is split and only the gradients cross processes, each array of them in a gloo round trip of
  its own (``flat_reduce=False``);
- ``group_flat``: blocks with each step's gradients and scalar metrics all-reduced as one flat
  array (``jaxflow.learn.reduce``, ``flat_reduce=True``).

Reported per network width: the median seconds per update (repeats interleaved) and the
learner processes' CPU seconds per update. Writes ``results/group_update.json``, ``.md`` and
``.png``.

    .venv/bin/python benchmarks/group_update.py
    .venv/bin/python benchmarks/group_update.py --hidden 64 512 --updates 10 --repeats 5
"""

from __future__ import annotations

import datetime
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import argument_parser, cpu_clock, logger, machine_info, save_figure, write_report

from jaxflow.api.ray_program import learner_factory
from jaxflow.api.registry import get_algorithm
from jaxflow.config import make_config
from jaxflow.dataflow.placement import Placement
from jaxflow.learn.group import LearnerGroup

log = logger("group_update")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RUNNERS = ("one", "group_whole", "group_blocks", "group_flat")
BATCH, MINIBATCH, EPOCHS = 1024, 256, 8  # PPO's defaults: 32 SGD steps per update
OBS, ACTIONS = 4, 2  # CartPole


def ppo_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A PPO train batch of a uniform random CartPole policy."""
    return {
        "obs": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "actions": rng.integers(0, ACTIONS, BATCH).astype(np.int32),
        "logp": np.full(BATCH, -np.log(ACTIONS), np.float32),
        "advantages": rng.normal(size=BATCH).astype(np.float32),
        "value_targets": rng.normal(size=BATCH).astype(np.float32),
        "values": rng.normal(size=BATCH).astype(np.float32),
    }


def learners(hidden: int) -> tuple[dict[str, Any], list[LearnerGroup]]:
    """Each runner's learner for a (hidden, hidden) network, all from the same parameters."""
    spec = get_algorithm("PPO")
    config = make_config(
        spec.config_cls, train_batch_size=BATCH, minibatch_size=MINIBATCH, num_epochs=EPOCHS, hidden_sizes=(hidden,) * 2
    )
    _, make_learner = learner_factory(config, spec)
    ways = (
        dict(shuffle_devices=1),
        dict(shuffle_devices=2, flat_reduce=False),
        dict(shuffle_devices=2, flat_reduce=True),
    )
    # 6 learner processes on the 2 CPUs ray.init gives: they take turns, as the runners do.
    groups = [LearnerGroup(functools.partial(make_learner, **way), 2, Placement(num_cpus=0.25)) for way in ways]
    return dict(zip(RUNNERS, [make_learner(), *groups])), groups


def measure(hidden: int, updates: int, repeats: int, seed: int) -> dict[str, Any]:
    runners, groups = learners(hidden)
    clocks: dict[str, Callable[[], float]] = {
        "one": cpu_clock([]),
        **{name: cpu_clock(group.processes) for name, group in zip(RUNNERS[1:], groups)},
    }
    batches = [ppo_batch(np.random.default_rng(seed + i)) for i in range(updates)]
    for learner in runners.values():  # compiles
        learner.update(batches[0])
    seconds: dict[str, list[float]] = {k: [] for k in RUNNERS}
    cpu: dict[str, list[float]] = {k: [] for k in RUNNERS}
    for i in range(repeats):  # interleaved, so the machine's load hits all four alike
        log(f"hidden {hidden}: repeat {i + 1}/{repeats}")
        for name, learner in runners.items():
            c0, t0 = clocks[name](), time.perf_counter()
            for batch in batches:
                learner.update(batch)
            seconds[name].append((time.perf_counter() - t0) / updates)
            cpu[name].append((clocks[name]() - c0) / updates)
    for group in groups:
        group.stop()
    return {
        "hidden": hidden,
        "seconds_per_update": seconds,
        "cpu_s_per_update": cpu,
        "median_s": {k: statistics.median(v) for k, v in seconds.items()},
        "median_cpu_s": {k: statistics.median(v) for k, v in cpu.items()},
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# A PPO update: one learner against a group of 2 processes, minibatches whole, in blocks, or in blocks reduced flat",
        "",
        f"{report['time']} · {m['cpu_count']} CPUs · load {m['load_average_at_start'][0]:.1f} at start · "
        f"jax {m['jax']} on {m['jax_backend']} · batch {BATCH}, minibatch {MINIBATCH}, {EPOCHS} epochs · "
        f"median of {report['args']['repeats']} repeats of {report['args']['updates']} updates",
        "",
        "| hidden | one (s) | group, whole (s) | group, blocks (s) | group, flat (s) | flat / whole "
        "| CPU s: one / whole / blocks / flat |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        s, c = r["median_s"], r["median_cpu_s"]
        lines.append(
            f"| {r['hidden']} | {' | '.join(f'{s[k]:.3f}' for k in RUNNERS)} "
            f"| {s['group_flat'] / s['group_whole']:.2f} | {' / '.join(f'{c[k]:.3f}' for k in RUNNERS)} |"
        )
    return "\n".join(lines) + "\n"


def figure(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.2
    xs = np.arange(len(report["results"]))
    for i, name in enumerate(RUNNERS):
        ax.bar(xs + (i - 1.5) * width, [r["median_s"][name] for r in report["results"]], width, label=name)
    ax.set_xticks(xs, [f"hidden {r['hidden']}" for r in report["results"]])
    ax.set_ylabel("seconds per update (median)")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    p = argument_parser(__doc__)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 512])
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    args = p.parse_args(argv)
    ray.init(num_cpus=2, include_dashboard=False)
    report = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "args": vars(args),
        "results": [measure(h, args.updates, args.repeats, args.seed) for h in args.hidden],
    }
    write_report(args.out_dir, "group_update", report, markdown(report))
    figure(report, os.path.join(args.out_dir, "group_update.png"))


if __name__ == "__main__":
    main()
