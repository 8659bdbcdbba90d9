"""``jaxflow`` command line: train, tune, evaluate, export, plot, list."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from jaxflow.api.cli_args import new_run, overrides, parse
from jaxflow.api.cli_flags import MODES
from jaxflow.api.interrupts import interruptible, starting_ray
from jaxflow.api.logdir import check_logdir
from jaxflow.api.loggers import parse_loggers
from jaxflow.api.stops import DEFAULT_STOP, DEFAULT_STOP_NOTE, STOPPED_BY, check_ahead, check_reported, parse_stop
from jaxflow.api.tracker_checks import check_trackers
from jaxflow.api.user_errors import (
    check_address,
    check_evaluate,
    check_outputs,
    check_train,
    one_line,
    user_errors,
)
from jaxflow.api.user_modules import import_modules

PLAYING = ("evaluate", "export")
"""The commands that play a checkpoint's policy in the user's env without writing a run: an
error from the env (or a divergence guard) ends them in one line too, status 1."""

__all__ = ["MODES", "main"]


def _train(args: argparse.Namespace) -> int:
    from jaxflow.api.loop import train

    stop = parse_stop(args.stop) or dict(DEFAULT_STOP)
    store, resume = _storage(args)
    algo, logdir = _resumed_run(args, resume, stop) if resume else _new_run(args, store, stop)
    if not args.stop and not args.quiet:  # said once the run is checked and built, before it trains
        print(DEFAULT_STOP_NOTE, flush=True)
    try:
        result = train(
            algo,
            stop,
            logdir,
            args.checkpoint_every,
            verbose=not args.quiet,
            overwrite=args.overwrite,
            loggers=parse_loggers(args.logger),
            keep_checkpoints=args.keep_checkpoints,
            storage=store,
        )
    except Exception as e:
        from jaxflow.api.failures import raise_run_failure

        raise_run_failure(e, algo, logdir)  # a divergence guard's stop, in one line
        raise
    finally:
        algo.stop()
    stopped = f" (stopped by {result[STOPPED_BY]})" if result.get(STOPPED_BY) else ""
    print(
        f"done: iteration {result['training_iteration']}{stopped}, env steps {result['env_steps_sampled']:,}, "
        f"episode_return_mean {result['episode_return_mean']:.1f}, {result['time_s']:.1f}s; checkpoints in {logdir}",
        flush=True,
    )
    return 0


def _resumed_run(args: argparse.Namespace, resume: str, stop: dict[str, float]) -> tuple[Any, str]:
    """``(algorithm, logdir)`` of ``train --resume``: the checkpoint verified and fitted to the
    overrides, and ``stop`` checked against its config and counters, before Ray starts; the run
    continued in the run directory it belongs to."""
    from jaxflow.api.algorithm import Algorithm
    from jaxflow.api.callbacks import run_callbacks
    from jaxflow.api.program import resolve_mode
    from jaxflow.api.restore import plan_restore, run_directory

    plan = plan_restore(resume, overrides(args), from_strings=True, warn=False)  # verified before Ray starts
    check_reported(stop, plan.config)
    check_ahead(stop, plan.meta.get("context", {}).get("counters", {}), plan.path)  # else one more iteration
    logdir = run_directory(resume)  # a checkpoint's folder continues the run it belongs to
    for _, why in plan.skipped:
        print(f"jaxflow: skipped {why}", flush=True)
    spec, config = plan.spec, plan.config
    mode = resolve_mode(config, spec)
    callbacks = run_callbacks(config, spec, restoring=True)  # remembered or --set: made before Ray starts
    print(f"jaxflow: resuming {spec.name} from {plan.path}, {_describe(config, mode)}", flush=True)
    _start_ray(args, spec, config, mode)
    return Algorithm.from_plan(plan, callbacks), logdir


def _new_run(args: argparse.Namespace, store: Any, stop: dict[str, float]) -> tuple[Any, str]:
    """``(algorithm, logdir)`` of a new run: its config, ``stop`` keys, env spaces and model
    checked, its storage and logdir claimed, all before Ray starts."""
    from jaxflow.api.algorithm import Algorithm
    from jaxflow.api.callbacks import run_callbacks
    from jaxflow.api.program import resolve_mode
    from jaxflow.api.spaces import env_spaces

    spec, config = new_run(args)  # validated before any actor starts
    check_reported(stop, config)  # a key the run never reports would train forever
    mode = resolve_mode(config, spec)
    if spec.run.program is None:  # a standard program acts in config.env: its spaces are checked before Ray starts
        env_spaces(config, spec)
    if getattr(config, "model", None):  # the user's module is imported in the run; its name is checked now
        from jaxflow.networks.models import check_model

        check_model(config.model)
    callbacks = run_callbacks(config, spec)  # --set callbacks=MODULE:ATTR, made and checked before Ray starts
    logdir = args.logdir or os.path.join(
        "runs", f"{spec.name.lower()}-{config.env.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if store is not None:
        store.claim(args.overwrite)
    check_logdir(logdir, args.overwrite)  # refused before anything starts; claimed (or replaced) once the run is built
    print(f"jaxflow: {spec.name} on {config.env}, {_describe(config, mode)}, logdir {logdir}", flush=True)
    _start_ray(args, spec, config, mode)
    return Algorithm(config, spec, callbacks=callbacks), logdir


def _start_ray(args: argparse.Namespace, spec: Any, config: Any, mode: str) -> None:
    """Ray for a Ray-mode run that needs it: a local Ray of its own, or the cluster ``--address``
    (else ``RAY_ADDRESS``) names, said in one line; a plan's run with nothing outside this
    process (``num_workers=0``) runs without Ray."""
    from jaxflow.api.ray_program import init_ray, needs_ray

    if mode == "ray" and (args.address or spec.plan is None or needs_ray(config, spec)):
        with starting_ray():  # Ray's driver answers SIGTERM with a stack dump; jaxflow with one line
            joined = init_ray(args.address)
        if joined is not None and not args.quiet:
            print(f"jaxflow: joined the Ray cluster at {joined}", flush=True)


def _storage(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The run's storage (opened and checked now, before anything starts) and the local path
    a resume reads: a storage URI's run (or checkpoint) is pulled into --logdir, else into a
    cache directory, and the resumed run goes on copying itself there."""
    from jaxflow.api.storage import Storage, cache_dir, is_uri, split_checkpoint

    store = Storage(args.storage) if args.storage else None
    if not args.resume or not is_uri(args.resume):
        return store, args.resume
    run_uri, checkpoint_name = split_checkpoint(args.resume)
    source = Storage(run_uri)
    local = args.logdir or cache_dir(run_uri)
    resume = source.pull(local, checkpoint_name)
    print(f"jaxflow: pulled {args.resume} into {local}", flush=True)
    return store or source, resume


def _describe(config: Any, mode: str) -> str:
    """How the run will train, for the first line it prints."""
    chosen = " (auto)" if config.mode == "auto" else ""
    if mode == "ray":
        return f"mode ray{chosen} ({config.rollout.num_workers} rollout workers)"
    agents = config.device.num_seeds * len(next(iter(config.device.sweep.values()), [None]))
    pbt = config.device.pbt
    trained = f", population-based training of {', '.join(pbt)} every {config.device.pbt_interval} iterations"
    return f"mode device{chosen}: {agents} agent{'s' if agents > 1 else ''} in one compiled function" + (
        trained if pbt else ""
    )


def _export(args: argparse.Namespace) -> int:
    from jaxflow.api.export import export_policy

    out = export_policy(args.checkpoint, args.out, args.member, args.overwrite)
    print(f"jaxflow: exported the greedy policy to {out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from jaxflow.api.plot import plot_runs

    plot_runs(args.runs, args.metric, args.x, args.out, args.overwrite)
    print(f"jaxflow: {len(args.runs)} learning curve{'s' if len(args.runs) > 1 else ''} of {args.metric} in {args.out}")
    return 0


def _list(args: argparse.Namespace, own_process: bool) -> int:
    from jaxflow.api.listing import list_command

    return list_command(args, own_process)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``jaxflow`` command line (``argv``: the words after ``jaxflow``; None: the process's own
    command line, ``sys.argv``); returns its exit status."""
    if argv is None:
        return interruptible(functools.partial(_command, own_process=True), sys.argv[1:])  # Ctrl-C, SIGTERM: one line
    return interruptible(_command, argv)


def _command(argv: Sequence[str], own_process: bool = False) -> int:
    """Runs the command ``argv`` names: its exit status; bad input, and a run a divergence guard or
    the user's own code stopped, end in one line (status 2 and 1), other errors of jaxflow's own
    keep their traceback."""
    args = None
    try:
        args = parse(argv)
        import_modules(getattr(args, "imports", []))  # the user's envs and models, before anything is built
        if args.command == "train":
            check_train(args)
            check_trackers(parse_loggers(args.logger))  # names, packages, credentials, stores: before anything starts
            return _train(args)
        if args.command == "tune":
            if args.address is not None:
                check_address(args.address)
            from jaxflow.tune.command import run  # Ray Tune loads only for this command

            return run(args)
        check_outputs(args)  # what evaluate, export and plot would write over, before anything is read
        if args.command == "evaluate":
            check_evaluate(args)
            from jaxflow.api.cli_evaluate import evaluate_command

            return evaluate_command(args)
        if args.command == "export":
            check_evaluate(args)
            return _export(args)
        if args.command == "plot":
            return _plot(args)
        return _list(args, own_process)
    except BrokenPipeError:  # `jaxflow list | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as e:  # not SystemExit (--help), which must not import what user_errors() names
        if args is not None and args.debug:  # --debug: the traceback
            raise
        from jaxflow.api.failures import RUN_FAILURE_STATUS, RunFailure, command_failure

        if isinstance(e, RunFailure):  # a divergence guard stopped the run: its traceback is in error.log
            print(f"jaxflow: error: {e}", file=sys.stderr)
            return RUN_FAILURE_STATUS
        failure = command_failure(e, args.command) if args is not None and args.command in PLAYING else None
        if failure is not None:  # the user's env (or a guard) stopped an evaluation
            print(f"jaxflow: error: {failure}", file=sys.stderr)
            return RUN_FAILURE_STATUS
        if not isinstance(e, user_errors()):
            raise
        print(f"jaxflow: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
