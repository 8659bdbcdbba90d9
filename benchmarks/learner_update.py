"""Learner update time on the CPU for the convolutional Atari losses: the ``Learner``
(which steps minibatch by minibatch from the host when the loss has convolutions and the
device is a CPU) against the same update compiled as one ``lax.scan`` over the SGD steps
(``jaxflow.learner.sgd_update`` under ``jit``), measured in the same run on the same batch.

XLA:CPU computes a convolution's weight gradient inside a loop body far slower than
outside one (jax-ml/jax#12868); this measures what stepping from the host recovers.
Writes ``results/learner_update.json`` and ``.md`` and prints the report.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import statistics
import time
from typing import Any, Callable

import jax
import numpy as np
from common import logger, machine_info, write_report

from jaxflow.algorithm import build_learner, get_algorithm
from jaxflow.learner import make_optimizer, sgd_update

log = logger("learner_update")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ENV = "ALE/Pong-v5"
OBS = (4, 84, 84)


def impala_batch(rng: np.random.Generator, config: Any) -> dict[str, np.ndarray]:
    """A batch-major IMPALA train batch: ``train_batch_size`` steps in sequences of T."""
    T = config.rollout_fragment_length
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
    n = config.replay_batch_size
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


def measure(name: str, repeats: int, seed: int) -> dict[str, Any]:
    algo, make_batch = CASES[name]
    spec = get_algorithm(algo)
    config = spec.config_cls(env=ENV, seed=seed)
    network, learner = build_learner(config, spec)
    num_epochs, minibatch_size = spec.sgd(config)
    # The baseline: the same loss, optimizer and SGD steps as one compiled scan.
    loss_fn = functools.partial(spec.loss, apply_fn=network.apply, config=config)
    scan = jax.jit(functools.partial(sgd_update, loss_fn, make_optimizer(config.lr, config.max_grad_norm),
                                     num_epochs, minibatch_size))
    batch = make_batch(np.random.default_rng(seed), config)
    start = learner.get_state()

    log(f"{name}: compiling both")
    first_scan = timed(lambda: scan(start, batch))
    first_learner = timed(lambda: learner.update(batch))
    # Both from the same state: the host loop must reach the scan's parameters.
    learner.set_state(start)
    learner.update(batch)
    expected, _ = scan(start, batch)
    leaves = jax.tree_util.tree_leaves
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(learner.get_weights()), leaves(jax.device_get(expected.params))))

    scan_s, learner_s = [], []
    for i in range(repeats):  # interleaved, so drift hits both
        log(f"{name}: repeat {i + 1}/{repeats}")
        scan_s.append(timed(lambda: scan(start, batch)))
        learner_s.append(timed(lambda: learner.update(batch)))
    n = len(next(iter(batch.values())))
    return {
        "algorithm": name, "loop": learner.loop, "samples": n * (batch["obs"].shape[1] if name == "IMPALA" else 1),
        "sgd_steps": num_epochs * (n // (minibatch_size or n)),
        "scan_s": scan_s, "learner_s": learner_s,
        "scan_median_s": statistics.median(scan_s), "learner_median_s": statistics.median(learner_s),
        "speedup": statistics.median(scan_s) / statistics.median(learner_s),
        "first_call_scan_s": first_scan, "first_call_learner_s": first_learner,
        "max_param_diff": diff,
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Learner update on the CPU: host-stepped minibatches vs one compiled scan",
        "",
        f"{report['time']} · {m['cpu_count']} CPUs ({m['cpu_model']}) · jax {m['jax']} on {m['jax_backend']} · "
        f"{ENV}, Nature CNN · median of {report['args']['repeats']} updates each, interleaved",
        "",
        "| algorithm | samples | SGD steps | Learner loop | scan (s/update) | Learner (s/update) | speed-up | first call scan / Learner (s) | max param diff |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['algorithm']} | {r['samples']} | {r['sgd_steps']} | {r['loop']} | {r['scan_median_s']:.2f} "
            f"| {r['learner_median_s']:.2f} | {r['speedup']:.1f}x | {r['first_call_scan_s']:.1f} / {r['first_call_learner_s']:.1f} "
            f"| {r['max_param_diff']:.1e} |"
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
