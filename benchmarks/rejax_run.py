"""One rejax run, for ``device_vs_rejax.py``: executed by rejax's own virtual environment's
Python (``benchmarks/.venvs/rejax``), never imported by jaxflow.

Reads a JSON spec on stdin (``algo``, ``config``: rejax's own config keys, ``seeds``,
``repeats``), compiles ``algo.train`` (``vmap``-ed over the seeds when there are several) and
runs it ``repeats`` times more with fresh seeds, timing each compiled run as a whole (rejax
trains the whole budget in one call, evaluating every ``eval_freq`` env steps on the way).
Prints one JSON line: the compile-and-first-run seconds, each timed run's seconds, and the
evaluation curve of the last run (env steps, mean over seeds of the 128-episode mean return).
"""

from __future__ import annotations

import json
import sys
import time

import jax
import numpy as np
import rejax


def main() -> None:
    spec = json.load(sys.stdin)
    algo = rejax.get_algo(spec["algo"]).create(**spec["config"])
    seeds, repeats = int(spec["seeds"]), int(spec["repeats"])
    train = jax.jit(jax.vmap(algo.train)) if seeds > 1 else jax.jit(algo.train)

    def keys(offset: int) -> jax.Array:
        k = jax.random.split(jax.random.PRNGKey(offset), seeds)
        return k if seeds > 1 else k[0]

    t0 = time.perf_counter()
    jax.block_until_ready(train(keys(0)))
    first_s = time.perf_counter() - t0
    runs_s, evaluation = [], None
    for r in range(repeats):
        t0 = time.perf_counter()
        _, evaluation = jax.block_until_ready(train(keys(1 + r)))
        runs_s.append(time.perf_counter() - t0)
    _lengths, returns = evaluation  # [evals, 128] or [seeds, evals, 128]
    mean_return = np.asarray(returns).mean(axis=-1)  # each evaluation's 128 episodes
    mean_return = mean_return.mean(axis=0) if seeds > 1 else mean_return  # and the seeds
    eval_freq, total = int(spec["config"]["eval_freq"]), int(spec["config"]["total_timesteps"])
    # The first evaluation is before training (rejax's default), then one every eval_freq env steps.
    steps = [min(i * eval_freq, total) for i in range(len(mean_return))]
    print(
        json.dumps({"first_s": first_s, "runs_s": runs_s, "curve": [[s, float(m)] for s, m in zip(steps, mean_return)]})
    )


if __name__ == "__main__":
    main()
