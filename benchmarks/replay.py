"""Replay data structures: PrioritizedReplayBuffer throughput against uniform and naive
O(N) proportional sampling, and bytes per stored Atari transition with frame-deduplicated
rows against the naive layout.

Writes ``benchmarks/results/replay.json`` and ``.md`` and prints the Markdown report.
Plain numpy: no Ray, no JAX.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from common import argument_parser, logger, machine_info, write_report

from jaxflow.replay.buffer import PrioritizedReplayBuffer
from jaxflow.replay.sum_tree import SumTree
from jaxflow.replay.transitions import decode_rows, encode_fragment

log = logger("replay")

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

ALPHA = 0.6
BETA = 0.4
ATARI_ENV = "ALE/Pong-v5"
FRAME_STACK = 4
SCREEN = 84
ATARI_N_STEP = 3
ATARI_GAMMA = 0.99
# Naive layout: obs and next_obs as whole uint8 stacks, plus int32 action, float32 reward
# and float32 discount.
NAIVE_ATARI_BYTES = 2 * FRAME_STACK * SCREEN * SCREEN + 4 + 4 + 4
ATARI_TARGET_BYTES = 7680  # 7.5 KB
PROJECTED_TRANSITIONS = 1_000_000


# ---------------------------------------------------------------------------------------
# Part 1: throughput of add / sample / update_priorities
# ---------------------------------------------------------------------------------------


def cartpole_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` CartPole-sized transitions (obs and next_obs float32[4], int32 action, float32 reward and discount)."""
    return {
        "obs": rng.standard_normal((n, 4)).astype(np.float32),
        "next_obs": rng.standard_normal((n, 4)).astype(np.float32),
        "actions": rng.integers(2, size=n).astype(np.int32),
        "rewards": np.ones(n, np.float32),
        "discounts": np.full(n, 0.99, np.float32),
    }


def td_like_priorities(n: int, rng: np.random.Generator) -> np.ndarray:
    """``|TD error| + eps``-shaped priorities."""
    return np.abs(rng.standard_normal(n)) + 1e-6


class NaiveProportionalReplay:
    """Proportional prioritized replay without a tree: each draw normalizes all N
    priorities and calls ``rng.choice(n, p=...)``, which builds a CDF over them, so a
    sample costs O(N). It does the same work per call as ``PrioritizedReplayBuffer.sample``
    (indices, importance weights normalized by the smallest stored probability, gather)."""

    def __init__(self, capacity: int, alpha: float):
        self.capacity, self.alpha = capacity, alpha
        self.mass = np.zeros(capacity, np.float64)
        self.storage: dict[str, np.ndarray] = {}
        self.size = self.next = 0

    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray) -> None:
        n = len(priorities)
        if not self.storage:
            self.storage = {k: np.zeros((self.capacity,) + v.shape[1:], v.dtype) for k, v in batch.items()}
        slots = (self.next + np.arange(n)) % self.capacity
        for k, v in batch.items():
            self.storage[k][slots] = v
        self.mass[slots] = priorities**self.alpha
        self.next = (self.next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(
        self, batch_size: int, rng: np.random.Generator, beta: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        mass = self.mass[: self.size]
        indices = rng.choice(self.size, size=batch_size, p=mass / mass.sum())
        weights = ((mass[indices] / mass[mass > 0].min()) ** -beta).astype(np.float32)
        return {k: v[indices] for k, v in self.storage.items()}, indices, weights

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        self.mass[indices] = priorities**self.alpha


class UniformRing:
    """Reference lower bound: a plain ring sampled with ``rng.integers`` (no priorities, unit weights)."""

    def __init__(self, storage: Mapping[str, np.ndarray]):
        self.storage, self.size = storage, len(next(iter(storage.values())))

    def sample(
        self, batch_size: int, rng: np.random.Generator, beta: float
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        indices = rng.integers(self.size, size=batch_size)
        return {k: v[indices] for k, v in self.storage.items()}, indices, np.ones(batch_size, np.float32)


def fill(buffer: Any, capacity: int, batch_size: int, seed: int) -> float:
    """Adds random transitions until the buffer holds ``capacity``; returns the seconds taken."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for start in range(0, capacity, batch_size):
        n = min(batch_size, capacity - start)
        buffer.add(cartpole_batch(n, rng), td_like_priorities(n, rng))
    return time.perf_counter() - t0


def time_per_call(fn: Callable[[int], Any], calls: int) -> float:
    """Mean seconds per call of ``fn(i)`` over ``calls`` calls."""
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t0) / calls


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    capacity, batch = args.capacity, args.batch_size
    rng = np.random.default_rng(args.seed)
    impls: dict[str, Any] = {
        "prioritized": PrioritizedReplayBuffer(capacity, alpha=ALPHA),
        "uniform_alpha0": PrioritizedReplayBuffer(capacity, alpha=0.0),
        "naive_rng_choice": NaiveProportionalReplay(capacity, alpha=ALPHA),
    }
    fill_s = {}
    for name, buf in impls.items():
        fill_s[name] = fill(buf, capacity, batch, args.seed)
        log(f"filled {name} to {capacity:,} in {fill_s[name]:.2f} s")
    impls["uniform_ring"] = UniformRing(impls["prioritized"].storage)

    # Inputs made before timing, so the timed loops do only the data structure's work.
    add_batch = cartpole_batch(batch, rng)
    add_priorities = td_like_priorities(batch, rng)
    # Indices for update_priorities as a learner would send them: drawn by each buffer itself.
    num_updates = max(args.calls, args.naive_calls)
    update_indices = {
        name: [impls[name].sample_indices(batch, rng, BETA)[0] for _ in range(num_updates)]
        for name in ("prioritized", "uniform_alpha0")
    }
    update_indices["naive_rng_choice"] = update_indices["prioritized"]
    new_priorities = [td_like_priorities(batch, rng) for _ in range(num_updates)]

    def ops(name: str, buf: Any) -> dict[str, Callable[[int], Any]]:
        sample_rng = np.random.default_rng(args.seed + 1)
        out: dict[str, Callable[[int], Any]] = {"sample": lambda i: buf.sample(batch, sample_rng, BETA)}
        if name == "uniform_ring":
            return out
        out["add"] = lambda i: buf.add(add_batch, add_priorities)
        if name != "naive_rng_choice":
            out["sample_indices"] = lambda i: buf.sample_indices(batch, sample_rng, BETA)
        out["update_priorities"] = lambda i: buf.update_priorities(update_indices[name][i], new_priorities[i])
        return out

    cases = [(name, op, fn) for name, buf in impls.items() for op, fn in ops(name, buf).items()]
    per_call: dict[tuple[str, str], list[float]] = {(n, o): [] for n, o, _ in cases}
    for _, _, fn in cases:  # untimed warm-up
        time_per_call(fn, 2)
    for rep in range(args.repeats):
        # Cases in reversed order on odd reps, so a drift in machine load hits all of them alike.
        for name, op, fn in cases if rep % 2 == 0 else cases[::-1]:
            calls = args.naive_calls if name == "naive_rng_choice" else args.calls
            per_call[(name, op)].append(time_per_call(fn, calls))
        log(
            f"throughput rep {rep + 1}/{args.repeats}: prioritized sample "
            f"{per_call[('prioritized', 'sample')][-1] * 1e6:.0f} µs, naive sample "
            f"{per_call[('naive_rng_choice', 'sample')][-1] * 1e6:.0f} µs"
        )

    rows = []
    op_order = ("add", "sample", "sample_indices", "update_priorities")
    for (name, op), times in sorted(
        per_call.items(), key=lambda kv: (list(impls).index(kv[0][0]), op_order.index(kv[0][1]))
    ):
        med = statistics.median(times)
        rows.append(
            {
                "impl": name,
                "op": op,
                "calls_per_repeat": args.naive_calls if name == "naive_rng_choice" else args.calls,
                "us_per_call": [t * 1e6 for t in times],
                "median_us_per_call": med * 1e6,
                "transitions_per_s": batch / med,
            }
        )
    med = {(r["impl"], r["op"]): r["median_us_per_call"] for r in rows}
    ratios = {
        # > 1: prioritization costs that much more time per call than the same tree with alpha = 0.
        "prioritized_over_uniform_alpha0": {
            op: med[("prioritized", op)] / med[("uniform_alpha0", op)]
            for op in ("add", "sample", "sample_indices", "update_priorities")
        },
        # > 1: the sum-tree is that many times faster than the O(N) sampler.
        "naive_over_sumtree": {
            op: med[("naive_rng_choice", op)] / med[("prioritized", op)]
            for op in ("add", "sample", "update_priorities")
        },
        "prioritized_over_uniform_ring_sample": med[("prioritized", "sample")] / med[("uniform_ring", "sample")],
    }
    prio = impls["prioritized"]
    return {
        "capacity": capacity,
        "batch_size": batch,
        "alpha": ALPHA,
        "beta": BETA,
        "bytes_per_transition": prio.bytes_per_transition,
        "buffer_nbytes": prio.nbytes,
        "tree_nbytes": prio.tree.nbytes,
        "fill_s": fill_s,
        "repeats": args.repeats,
        "rows": rows,
        "ratios": ratios,
    }


# ---------------------------------------------------------------------------------------
# Part 2: bytes per stored Atari transition
# ---------------------------------------------------------------------------------------


def make_atari_env() -> Any:
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    env = gymnasium.make(ATARI_ENV, frameskip=1)
    env = gymnasium.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=SCREEN, grayscale_obs=True)
    return gymnasium.wrappers.FrameStackObservation(env, FRAME_STACK)


def atari_stream(num_envs: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Random-action rollouts: ``obs [steps+1, B, 4, 84, 84]`` uint8, ``actions``, ``rewards``,
    ``terminals`` ``[steps, B]`` and the number of resets. After an episode ends the next
    observation is the new episode's first, as on a rollout worker."""
    envs = [make_atari_env() for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    try:
        obs = np.empty((steps + 1, num_envs, FRAME_STACK, SCREEN, SCREEN), np.uint8)
        actions = rng.integers(envs[0].action_space.n, size=(steps, num_envs)).astype(np.int32)
        rewards = np.zeros((steps, num_envs), np.float32)
        terminals = np.zeros((steps, num_envs), bool)
        resets = 0
        for b, env in enumerate(envs):
            obs[0, b] = env.reset(seed=seed + b)[0]
        for t in range(steps):
            for b, env in enumerate(envs):
                o, r, terminated, truncated, _ = env.step(int(actions[t, b]))
                rewards[t, b], terminals[t, b] = r, terminated
                if terminated or truncated:
                    o, _ = env.reset()
                    resets += 1
                obs[t + 1, b] = o
        return obs, actions, rewards, terminals, resets
    finally:
        for env in envs:
            env.close()


def n_step_inputs(rewards: np.ndarray, terminals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns, bootstrap discounts (0 after a terminal) and offsets ``min(n, T - t)``
    of a ``[T, B]`` fragment, as DQN's workers compute them (values do not change the bytes)."""
    num_steps = rewards.shape[0]
    ret = np.zeros_like(rewards)
    disc = np.ones_like(rewards)
    offsets = np.minimum(ATARI_N_STEP, num_steps - np.arange(num_steps))[:, None].repeat(rewards.shape[1], 1)
    for i in range(ATARI_N_STEP):
        valid = (np.arange(num_steps) + i < num_steps)[:, None]
        r_i = np.roll(rewards, -i, axis=0)
        d_i = np.roll(np.where(terminals, 0.0, ATARI_GAMMA).astype(np.float32), -i, axis=0)
        ret = ret + np.where(valid, disc * r_i, 0.0)
        disc = np.where(valid, disc * d_i, disc)
    return ret.astype(np.float32), disc.astype(np.float32), offsets.astype(np.int32)


def atari_bytes(args: argparse.Namespace) -> dict[str, Any]:
    steps = args.atari_steps_per_env
    log(f"Atari: {args.atari_envs} x {ATARI_ENV}, {steps} random-action steps per env")
    t0 = time.perf_counter()
    obs, actions, rewards, terminals, resets = atari_stream(args.atari_envs, steps, args.seed)
    rollout_s = time.perf_counter() - t0
    log(f"  rollouts took {rollout_s:.1f} s ({resets} episode resets)")
    results = []
    for T in args.fragment_lengths:
        num_fragments = steps // T
        if num_fragments < 1:
            log(f"  T={T}: skipped, longer than --atari-steps-per-env {steps}")
            continue
        encoded, encode_s, lookup = [], [], []
        next_id = 0
        for f in range(num_fragments):
            s = slice(f * T, (f + 1) * T)
            ret, disc, offsets = n_step_inputs(rewards[s], terminals[s])
            # Priority 1 + a unique id per transition (alpha = 1 keeps it exact in the tree),
            # so a sampled slot tells which (fragment, t, b) it is, for the decode check.
            ids = next_id + np.arange(T * args.atari_envs).reshape(T, args.atari_envs)
            next_id += ids.size
            frag_obs = obs[f * T : (f + 1) * T + 1]
            t1 = time.perf_counter()
            rows, priorities = encode_fragment(
                frag_obs, actions[s], ret, disc, offsets, 1.0 + ids.astype(np.float64), frame_stack=FRAME_STACK
            )
            encode_s.append(time.perf_counter() - t1)
            encoded.append((rows, priorities))
            lookup.append((f * T, offsets))
        total_rows = sum(len(p) for _, p in encoded)
        buffer = PrioritizedReplayBuffer(total_rows, alpha=1.0)  # exactly the rows written: no empty slots
        for rows, priorities in encoded:
            buffer.add(rows, priorities)
        held = int(np.count_nonzero(buffer.tree.leaves > 0))
        storage_bytes = buffer.nbytes - buffer.tree.nbytes
        per_transition = buffer.nbytes / held

        # Decode check and timing: sampled slots rebuild exactly the stacks the env returned.
        rng = np.random.default_rng(args.seed)
        decode_rows(buffer.storage, buffer.sample_indices(args.batch_size, rng, 0.0)[0], FRAME_STACK)  # warm-up
        decode_us, mismatches, checked = [], 0, 0
        for _ in range(args.repeats):
            t1 = time.perf_counter()
            idx, _ = buffer.sample_indices(args.batch_size, rng, 0.0)
            decoded = decode_rows(buffer.storage, idx, FRAME_STACK)
            decode_us.append((time.perf_counter() - t1) * 1e6)
            ids = buffer.tree.get(idx).astype(np.int64) - 1
            frag, rest = np.divmod(ids, T * args.atari_envs)
            t, b = np.divmod(rest, args.atari_envs)
            start = frag * T + t
            offsets = np.stack([lookup[i][1] for i in range(num_fragments)])[frag, t, b]
            ok = np.all(decoded["obs"] == obs[start, b], axis=(1, 2, 3)) & np.all(
                decoded["next_obs"] == obs[start + offsets, b], axis=(1, 2, 3)
            )
            mismatches += int(np.count_nonzero(~ok))
            checked += len(idx)

        rows_per_transition = total_rows / held
        row_bytes = buffer.bytes_per_transition
        projected_rows = math.ceil(PROJECTED_TRANSITIONS * rows_per_transition)
        projected_bytes = projected_rows * row_bytes + SumTree(projected_rows).nbytes
        encode_med = statistics.median(encode_s)
        results.append(
            {
                "fragment_length": T,
                "num_envs": args.atari_envs,
                "fragments": num_fragments,
                "transitions": held,
                "rows": total_rows,
                "rows_per_transition": rows_per_transition,
                "row_bytes": row_bytes,
                "row_fields": {
                    k: {"dtype": str(v.dtype), "shape": list(v.shape[1:]), "bytes": int(v[0].nbytes)}
                    for k, v in buffer.storage.items()
                },
                "storage_bytes": storage_bytes,
                "tree_bytes": buffer.tree.nbytes,
                "bytes_per_transition": per_transition,
                "storage_bytes_per_transition": storage_bytes / held,
                "naive_bytes_per_transition": NAIVE_ATARI_BYTES,
                "naive_over_ours": NAIVE_ATARI_BYTES / per_transition,
                "within_7_5_kb": per_transition <= ATARI_TARGET_BYTES,
                "projected_gb_1m_transitions": projected_bytes / 1e9,
                "naive_projected_gb_1m_transitions": PROJECTED_TRANSITIONS * NAIVE_ATARI_BYTES / 1e9,
                "encode_ms_per_fragment_median": encode_med * 1e3,
                "encode_transitions_per_s": T * args.atari_envs / encode_med,
                "sample_decode_batch": args.batch_size,
                "sample_decode_us_median": statistics.median(decode_us),
                "decode_checked": checked,
                "decode_mismatches": mismatches,
            }
        )
        log(
            f"  T={T}: {held:,} transitions in {total_rows:,} rows, {per_transition:,.1f} B/transition, "
            f"decode check {checked - mismatches}/{checked}"
        )
    return {
        "env": ATARI_ENV,
        "frame_stack": FRAME_STACK,
        "n_step": ATARI_N_STEP,
        "steps_per_env": steps,
        "episode_resets": resets,
        "rollout_s": rollout_s,
        "target_bytes": ATARI_TARGET_BYTES,
        "results": results,
    }


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

IMPL_LABELS = {
    "prioritized": f"sum-tree, prioritized (alpha {ALPHA})",
    "uniform_alpha0": "sum-tree, uniform (alpha 0)",
    "naive_rng_choice": f"naive `rng.choice(n, p=p/p.sum())` (alpha {ALPHA})",
    "uniform_ring": "plain ring, `rng.integers` (reference)",
}


def markdown(report: dict[str, Any]) -> str:
    m, args = report["machine"], report["args"]
    lines = [
        "# Replay data structures",
        "",
        (
            f"{report['created']} · {m['cpu_count']} CPUs ({m['cpu_model']}), load average at start "
            f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} · numpy {m['numpy']} · Python {m['python']}"
        ),
        "",
    ]
    tp = report["throughput"]
    lines += ["## PrioritizedReplayBuffer throughput", ""]
    if tp is None:
        lines.append(f"Failed: {report['throughput_error']}")
    else:
        lines += [
            (
                f"Capacity {tp['capacity']:,}, filled before timing with CartPole-sized transitions "
                f"({tp['bytes_per_transition']} B each; buffer {tp['buffer_nbytes'] / 1e6:,.0f} MB of which trees "
                f"{tp['tree_nbytes'] / 1e6:,.0f} MB). Batches of {tp['batch_size']}, beta {tp['beta']}. Median over "
                f"{tp['repeats']} repeats of {args['calls']} calls ({args['naive_calls']} for the naive sampler)."
            ),
            "",
            "| implementation | op | µs per call | transitions/s |",
            "|---|---|---:|---:|",
        ]
        for r in tp["rows"]:
            lines.append(
                f"| {IMPL_LABELS[r['impl']]} | {r['op']} | {r['median_us_per_call']:,.1f} "
                f"| {r['transitions_per_s']:,.0f} |"
            )
        ra = tp["ratios"]
        lines += [
            "",
            "| ratio (median time per call) | add | sample | sample_indices | update_priorities |",
            "|---|---:|---:|---:|---:|",
            "| prioritized / uniform (alpha 0), same tree | "
            + " | ".join(
                f"{ra['prioritized_over_uniform_alpha0'][op]:.2f}"
                for op in ("add", "sample", "sample_indices", "update_priorities")
            )
            + " |",
            (
                "| **naive rng.choice / sum-tree** (speed-up) | "
                f"{ra['naive_over_sumtree']['add']:.2f} | **{ra['naive_over_sumtree']['sample']:.1f}** | — "
                f"| {ra['naive_over_sumtree']['update_priorities']:.2f} |"
            ),
            "",
            f"Prioritized sample / plain uniform ring sample: {ra['prioritized_over_uniform_ring_sample']:.2f}.",
        ]
    lines += ["", "## Bytes per stored Atari transition", ""]
    at = report["atari"]
    if at is None:
        lines.append(report["atari_error"])
    else:
        lines += [
            (
                f"{at['env']} (AtariPreprocessing 84x84 grayscale, frame skip 4, FrameStackObservation {at['frame_stack']}), "
                f"{args['atari_envs']} envs x {at['steps_per_env']} random-action steps ({at['episode_resets']} resets), cut "
                f"into fragments of T steps, encoded with `encode_fragment(frame_stack={at['frame_stack']})` and added to a "
                "PrioritizedReplayBuffer whose capacity is exactly the rows written. Bytes per transition = (storage + "
                f"sum/min-tree bytes) / transitions held. Naive layout: obs and next_obs as whole uint8 stacks + 12 B = "
                f"{NAIVE_ATARI_BYTES:,} B."
            ),
            "",
            (
                f"| T | fragments | transitions | rows/transition | B per row | **B per transition** | ≤ {at['target_bytes']:,} B "
                "| naive B | naive / ours | GB per 1M (ours) | GB per 1M (naive) | encode ms/fragment | sample+decode µs "
                "| decode check |"
            ),
            "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in at["results"]:
            lines.append(
                f"| {r['fragment_length']} | {r['fragments']} | {r['transitions']:,} | {r['rows_per_transition']:.4f} "
                f"| {r['row_bytes']:,} | **{r['bytes_per_transition']:,.1f}** | {'yes' if r['within_7_5_kb'] else 'NO'} "
                f"| {r['naive_bytes_per_transition']:,} | {r['naive_over_ours']:.2f} "
                f"| {r['projected_gb_1m_transitions']:.2f} | {r['naive_projected_gb_1m_transitions']:.2f} "
                f"| {r['encode_ms_per_fragment_median']:.1f} | {r['sample_decode_us_median']:,.0f} "
                f"| {r['decode_checked'] - r['decode_mismatches']}/{r['decode_checked']} exact |"
            )
        lines += [
            "",
            (
                "GB per 1M: 10^6 transitions at the measured rows/transition, storage plus the trees of that capacity "
                "(10^9 B). Encode: one fragment of T x envs transitions; sample+decode: one batch of "
                f"{args['batch_size']} (sample_indices + decode_rows)."
            ),
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argument_parser(__doc__)
    p.add_argument("--capacity", type=int, default=1_000_000, help="buffer capacity of the throughput part")
    p.add_argument("--batch-size", type=int, default=512, help="transitions per add / sample / update call")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats; the report gives their median")
    p.add_argument("--calls", type=int, default=200, help="calls per repeat for the sum-tree buffers")
    p.add_argument("--naive-calls", type=int, default=20, help="calls per repeat for the O(N) naive sampler")
    p.add_argument("--atari-envs", type=int, default=4, help="Atari envs B stepped side by side")
    p.add_argument(
        "--atari-steps-per-env",
        type=int,
        default=1024,
        help="random-action steps per Atari env; cut into fragments of each --fragment-lengths T",
    )
    p.add_argument("--fragment-lengths", type=int, nargs="+", default=[64, 128], help="fragment lengths T")
    p.add_argument("--skip-atari", action="store_true", help="leave out the Atari bytes part")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=RESULTS_DIR, help="where replay.json and .md go")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: capacity 100,000, 2 repeats of 50 calls (5 naive), 2 Atari envs x 256 steps",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.capacity, args.repeats, args.calls, args.naive_calls = 100_000, 2, 50, 5
        args.atari_envs, args.atari_steps_per_env = 2, 256
    if (
        min(
            args.capacity,
            args.batch_size,
            args.repeats,
            args.calls,
            args.naive_calls,
            args.atari_envs,
            args.atari_steps_per_env,
            *args.fragment_lengths,
        )
        < 1
    ):
        p.error("all sizes and counts must be >= 1")
    if args.batch_size > args.capacity:
        p.error("--batch-size must not exceed --capacity")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report: dict[str, Any] = {
        "benchmark": "replay",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k != "out_dir"},
        "machine": machine_info(runtime=False),
        "throughput": None,
        "throughput_error": None,
        "atari": None,
        "atari_error": None,
    }
    try:
        report["throughput"] = throughput(args)
    except Exception as e:
        traceback.print_exc()
        report["throughput_error"] = f"{type(e).__name__}: {e}"
    if args.skip_atari:
        report["atari_error"] = "Skipped (--skip-atari)."
    else:
        missing = []
        for module in ("ale_py", "cv2"):
            try:
                __import__(module)
            except ImportError:
                missing.append(module)
        if missing:
            report["atari_error"] = (
                f"Skipped: {', '.join(missing)} not installed (pip install ale-py opencv-python; "
                "AtariPreprocessing resizes with OpenCV)."
            )
            log(report["atari_error"])
        else:
            try:
                report["atari"] = atari_bytes(args)
            except Exception as e:
                traceback.print_exc()
                report["atari_error"] = f"Failed: {type(e).__name__}: {e}"
    text = markdown(report)
    write_report(args.out_dir, "replay", report, text)


if __name__ == "__main__":
    main()
