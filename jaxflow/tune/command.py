"""``jaxflow tune``: every input checked before Ray starts, the experiment run with Tune's own
output silenced, a line per trial as it ends, then one table of the trials and the best trial's
checkpoint."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from jaxflow.api.cli_args import overrides
from jaxflow.api.interrupts import starting_ray
from jaxflow.api.outputs import TUNE, claim_output
from jaxflow.api.registry import get_algorithm
from jaxflow.api.retention import BEST_FILE
from jaxflow.api.spaces import env_spaces
from jaxflow.api.stops import check_reported, parse_stop
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import parse_value, with_overrides
from jaxflow.tune.experiment import (
    TrialLines,
    best_checkpoint,
    describe_error,
    make_scheduler,
    results_table,
    trials,
    tuner,
)
from jaxflow.tune.search import search_space
from jaxflow.tune.trainable import placement_for

QUIET_TUNE = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
}
"""Ray's switches for Tune's console output while ``jaxflow tune`` runs, whose table at the end
says what Tune's would: its classic reporter (silent at verbose 0; the newer one always prints
a configuration box), and no warning that the experiment's state is saved often (it is saved
on this machine's disk at every trial checkpoint past the newest kept)."""
DEFAULT_STOP = {"training_iteration": 10.0}
"""Each trial's stop when ``--stop`` is not given."""


def run(args: argparse.Namespace) -> int:
    """Runs ``jaxflow tune``'s experiment; 0 when every trial finished, 1 when some failed."""
    from jaxflow.api.ray_program import init_ray

    if not args.algo:
        raise ConfigError("tune needs --algo NAME.")
    spec = get_algorithm(args.algo)
    settings = overrides(args)
    config = with_overrides(spec.config_cls(), settings)  # the fixed settings, validated
    fixed = {k: parse_value(spec.config_cls, k, v) for k, v in settings.items()}
    dims = search_space(spec.config_cls, args.search, fixed)
    stop = parse_stop(args.stop) or DEFAULT_STOP
    if "evaluation_interval" not in {d.field for d in dims}:  # a searched interval is each trial's own
        check_reported(stop, config)  # an evaluation/ key with no evaluation would keep every trial running
    scheduler = make_scheduler(args.scheduler, dims, stop, args.scheduler_interval, spec.config_cls)
    if spec.run.program is None:
        env_spaces(config, spec)  # the env's spaces against the algorithm's, before Ray starts
    logdir = args.logdir or os.path.join(
        "runs", f"tune-{spec.name.lower()}-{config.env.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    claim_output(logdir, TUNE)  # new or empty: Tune's files are never mixed with others, nor replaced
    print(
        f"jaxflow: tuning {spec.name} on {config.env}: {args.num_samples} sample(s) of "
        f"{', '.join(args.search) or 'the fixed settings'}, scheduler {args.scheduler}, logdir {logdir}",
        flush=True,
    )
    with starting_ray():  # a SIGTERM then ends the command in one line, not in Ray's stack dump
        joined = init_ray(args.address)
    if joined is not None:
        print(f"jaxflow: joined the Ray cluster at {joined}", flush=True)
    check_trial_fits(placement_for(config, spec).required_resources)
    fields = [d.field for d in dims]
    experiment = tuner(
        spec.name,
        fixed,
        dims,
        args.num_samples,
        scheduler,
        stop,
        logdir,
        args.checkpoint_every,
        args.max_failures,
        callbacks=[TrialLines(fields, stop)],  # a line per trial as it ends
    )
    results = _fit(experiment)
    print(results_table(results, fields, stop), flush=True)
    for r in trials(results):
        if r.error is not None:
            print(f"jaxflow: trial {r.metrics.get('trial_id', r.path)} failed: {describe_error(r.error)}", flush=True)
    best = best_checkpoint(results, logdir)
    if best is not None:
        print(f"best: trial {best['trial']}, return {best['score']:.1f}, checkpoint {best['checkpoint']} ({BEST_FILE})")
    return 1 if results.errors else 0


def _fit(experiment: Any) -> Any:
    """The Tuner ``experiment``'s results, Tune's console output off (:func:`_quiet_tune`). A signal
    that stops it (Ctrl-C; SIGTERM, raised as one by :func:`~jaxflow.api.interrupts.sigterm_raises`)
    shuts Ray down before it ends the command: Tune's exit hook would otherwise wait 60 s to delete
    its keys from a Ray GCS that the same signal stopped (``timeout`` signals the whole process group)."""
    try:
        with _quiet_tune():
            return experiment.fit()
    except KeyboardInterrupt:
        import ray

        ray.shutdown()
        raise


@contextlib.contextmanager
def _quiet_tune() -> Iterator[None]:
    """Ray's :data:`QUIET_TUNE` settings while Tune runs, the environment as it was after."""
    before = {name: os.environ.get(name) for name in QUIET_TUNE}
    os.environ.update(QUIET_TUNE)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_trial_fits(need: dict[str, float]) -> None:
    """Raises :class:`ConfigError` when one trial needs more than the whole Ray cluster has:
    Tune would keep it pending forever."""
    import ray

    have = ray.cluster_resources()
    short = {name: amount for name, amount in need.items() if have.get(name, 0) < amount}
    if short:
        raise ConfigError(
            f"each trial needs {need} (its driver, rollout workers and replay shards), but the Ray cluster "
            f"has { ({name: have.get(name, 0) for name in short}) } in all; set fewer --num-workers (0: "
            "sampling in the trial's process) or add nodes."
        )
