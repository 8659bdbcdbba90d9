"""Learner update time on the CPU for the convolutional Atari losses, three ways, measured in
the same run from the same state on the same batch:

- ``xla_scan``: the Nature CNN with XLA's convolutions, all SGD steps compiled as one
  ``lax.scan`` (``jaxflow.learn.sgd.sgd_update`` under ``jit``): the baseline;
- ``xla_host``: the same network in a ``jaxflow.Learner``, which steps a loss with
  convolutions minibatch by minibatch from the host on the CPU (XLA:CPU computes a
  convolution's weight gradient inside a loop body far slower than outside one,
  jax-ml/jax#12868);
- ``learner``: the algorithm's own network in a ``Learner``: the Nature CNN computes its
  convolutions as matrix products on the CPU (``jaxflow.networks.cpu_matmul_conv``), so its
  SGD steps stay in the scan.

Writes ``results/learner_update.json`` and ``.md`` and prints the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from common import logger, machine_info, write_report

from jaxflow.api.ray_program import build_learner
from jaxflow.api.registry import get_algorithm
from jaxflow.learn.sgd import make_optimizer, sgd_update

log = logger("learner_update")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENV = "ALE/Pong-v5"
OBS = (4, 84, 84)


def impala_batch(rng: np.random.Generator, config: Any) -> dict[str, np.ndarray]:
    """A batch-major IMPALA train batch: ``train_batch_size`` steps in sequences of T."""
    T = config.rollout.rollout_fragment_length
    B = config.train_batch_size // T
    return {
        "obs": rng.integers(0, 256, (B, T) + OBS, dtype=np.uint8),
        "last_obs": rng.integers(0, 256, (B,) + OBS, dtype=np.uint8),
        "actions": rng.integers(0, 6, (B, T)).astype(np.int32),
        "logp": np.full((B, T), -np.log(6.0), np.float32),
        "rewards": rng.choice(np.float32([-1, 0, 1]), (B, T)),
        "discounts": np.full((B, T), config.gamma, np.float32),
    }


def apex_batch(rng: np.random.Generator, config: Any) -> dict[str, np.ndarray]:
    """A replayed Ape-X batch of ``replay_batch_size`` transitions with importance weights."""
    n = config.distributed.replay_batch_size
    return {
        "obs": rng.integers(0, 256, (n,) + OBS, dtype=np.uint8),
        "next_obs": rng.integers(0, 256, (n,) + OBS, dtype=np.uint8),
        "actions": rng.integers(0, 6, n).astype(np.int32),
        "rewards": rng.choice(np.float32([-1, 0, 1]), n),
        "discounts": np.full(n, config.gamma, np.float32),
        "weights": rng.uniform(0.5, 1.0, n).astype(np.float32),
    }


CASES: dict[str, tuple[str, Callable[[np.random.Generator, Any], dict[str, np.ndarray]]]] = {
    "IMPALA": ("IMPALA", impala_batch),
    "APEX": ("APEX", apex_batch),
}


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


VARIANTS = ("xla_scan", "xla_host", "learner")


def measure(name: str, repeats: int, seed: int) -> dict[str, Any]:
    algo, make_batch = CASES[name]
    spec = get_algorithm(algo)
    config = spec.config_cls(env=ENV, seed=seed)
    policy, learner = build_learner(config, spec)
    xla_policy = dataclasses.replace(policy, network=policy.network.clone(conv=jax.lax.conv_general_dilated))
    _, xla_learner = build_learner(config, spec, policy=xla_policy)
    num_epochs, minibatch_size = spec.learner.sgd(config)
    loss_fn = functools.partial(spec.loss, policy=xla_policy, config=config)
    scan = jax.jit(
        functools.partial(
            sgd_update,
            loss_fn,
            make_optimizer(config.optimizer.lr, config.optimizer.max_grad_norm),
            num_epochs,
            minibatch_size,
        )
    )
    batch = make_batch(np.random.default_rng(seed), config)
    start = learner.get_state()

    def from_start(learner: Any) -> Callable[[], Any]:
        def update() -> Any:
            learner.set_state(start)
            return learner.update(batch)

        return update

    runs = {
        "xla_scan": lambda: scan(start, batch)[0].params,
        "xla_host": from_start(xla_learner),
        "learner": from_start(learner),
    }
    log(f"{name}: compiling all three")
    first = {k: timed(fn) for k, fn in runs.items()}
    # All from the same state: the learners must reach the baseline's parameters.
    leaves = jax.tree_util.tree_leaves
    expected = leaves(jax.device_get(runs["xla_scan"]()))
    diffs = {}
    for k, lrn in (("xla_host", xla_learner), ("learner", learner)):
        runs[k]()
        diffs[k] = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(lrn.get_weights()), expected))

    seconds: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for i in range(repeats):  # interleaved, so drift hits all three
        log(f"{name}: repeat {i + 1}/{repeats}")
        for k in VARIANTS:
            seconds[k].append(timed(runs[k]))
    medians = {k: statistics.median(v) for k, v in seconds.items()}
    n = len(next(iter(batch.values())))
    return {
        "algorithm": name,
        "loops": {"xla_host": xla_learner.loop, "learner": learner.loop},
        "samples": n * (batch["obs"].shape[1] if name == "IMPALA" else 1),
        "sgd_steps": num_epochs * (n // (minibatch_size or n)),
        "seconds": seconds,
        "median_s": medians,
        "first_call_s": first,
        "max_param_diff": diffs,
        "speedup_vs_xla_scan": medians["xla_scan"] / medians["learner"],
        "speedup_vs_xla_host": medians["xla_host"] / medians["learner"],
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Learner update on the CPU: XLA convolutions in a scan, XLA convolutions stepped from the host, "
        "the Learner with the Nature CNN's matrix-product convolutions",
        "",
        f"{report['time']} · {m['cpu_count']} CPUs ({m['cpu_model']}) · jax {m['jax']} on {m['jax_backend']} · "
        f"{ENV}, Nature CNN · median of {report['args']['repeats']} updates each, interleaved",
        "",
        "| algorithm | samples | SGD steps | XLA conv, scan (s) | XLA conv, host loop (s) | Learner (s, loop) "
        "| vs scan | vs host loop | first calls (s) | max param diff host / Learner |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        med, first, diff = r["median_s"], r["first_call_s"], r["max_param_diff"]
        lines.append(
            f"| {r['algorithm']} | {r['samples']} | {r['sgd_steps']} | {med['xla_scan']:.2f} | {med['xla_host']:.2f} "
            f"| {med['learner']:.2f} ({r['loops']['learner']}) | {r['speedup_vs_xla_scan']:.1f}x | {r['speedup_vs_xla_host']:.1f}x "
            f"| {' / '.join(f'{first[k]:.1f}' for k in VARIANTS)} | {diff['xla_host']:.1e} / {diff['learner']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algos", nargs="+", choices=sorted(CASES), default=sorted(CASES, reverse=True))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR)
    args = p.parse_args(argv)
    report = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": vars(args),
        "machine": machine_info(),
        "results": [measure(name, args.repeats, args.seed) for name in args.algos],
    }
    write_report(args.out_dir, "learner_update", report, markdown(report))


if __name__ == "__main__":
    main()
