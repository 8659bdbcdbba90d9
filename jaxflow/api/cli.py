"""``jaxflow`` command line: train, evaluate, export, plot, list."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from jaxflow.api.logdir import claim_logdir
from jaxflow.api.loggers import DEFAULT_LOGGERS, LOGGERS, parse_loggers
from jaxflow.api.plot import X_KEYS
from jaxflow.api.retention import DEFAULT_KEEP
from jaxflow.api.user_errors import Parser, check_evaluate, check_train, int_at_least, one_line, user_errors
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import load_config_file, with_overrides

MODES = ("auto", "ray", "device")


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="jaxflow", description="Accelerator-first reinforcement learning.")
    p.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (also accepted after the command)"
    )
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an algorithm (or resume a run)")
    t.add_argument("--algo", help="algorithm name, case-insensitive (see `jaxflow list`)")
    t.add_argument("--env", help="environment id (see `jaxflow list`)")
    t.add_argument("--num-workers", type=int, help="Ray rollout workers (0: sample in this process)")
    t.add_argument("--seed", type=int)
    t.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stop at the first condition met; repeatable (training_iteration, env_steps_sampled, "
        "episode_return_mean, time_s, evaluation/episode_return_mean with --set evaluation_interval=N)",
    )
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field, by its flat (lr) or dotted (optimizer.lr) name; repeatable",
    )
    t.add_argument(
        "--logdir", help="where progress, TensorBoard events and checkpoints go (a new directory, or see --overwrite)"
    )
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --logdir (its progress, config, events and checkpoints); without it, "
        "a logdir that holds a run is refused",
    )
    t.add_argument("--resume", metavar="LOGDIR", help="continue the run in LOGDIR from its last checkpoint")
    t.add_argument(
        "--checkpoint-every",
        type=int_at_least(0),
        default=10,
        help="iterations between checkpoints (0: at the end only)",
    )
    t.add_argument(
        "--keep-checkpoints",
        type=int_at_least(0),
        default=DEFAULT_KEEP,
        help="keep the newest N checkpoints and the best one (best_checkpoint.json names it); 0: keep all",
    )
    t.add_argument(
        "--mode",
        choices=MODES,
        help="Ray rollout workers, or rollout + update compiled on the device "
        "(gymnax and brax envs); default auto: device for gymnax/<id> and brax/<name> envs where the algorithm has it",
    )
    t.add_argument("--num-seeds", type=int, help="device mode: train this many seeds at once (vmapped)")
    t.add_argument(
        "--sweep",
        metavar="FIELD=V1,V2,...",
        help="device mode: train one agent per value of a numeric config field, all at once",
    )
    t.add_argument(
        "--pbt",
        metavar="FIELD,FIELD,...",
        help="device mode: population-based training of the agents, perturbing these float fields "
        "(--set pbt_interval=N, pbt_quantile=Q, pbt_resample_prob=P)",
    )
    t.add_argument(
        "--multiagent",
        metavar="FILE",
        help="a multi-agent run: its env, policies (each with its algorithm) and agent -> policy mapping, as JSON",
    )
    t.add_argument(
        "--logger",
        default=",".join(DEFAULT_LOGGERS),
        help=f"where results go besides the console: a comma-separated list out of {', '.join(LOGGERS)} "
        "(wandb and mlflow need their extras: pip install 'jaxflow-rl[wandb]')",
    )
    t.add_argument("--address", help="address of an existing Ray cluster (default: start a local Ray)")
    t.add_argument("--quiet", action="store_true", help="no progress output")

    e = sub.add_parser("evaluate", help="run a checkpoint's greedy policy")
    e.add_argument("--checkpoint", required=True, help="a checkpoint, or a logdir (its latest checkpoint)")
    e.add_argument("--episodes", type=int_at_least(1), default=10)
    e.add_argument("--seed", type=int_at_least(0))
    e.add_argument("--video", metavar="DIR", help="also record each episode as DIR/episode_<k>.mp4")

    x = sub.add_parser("export", help="a checkpoint's greedy policy for JAX and numpy alone")
    x.add_argument("--checkpoint", required=True, help="a checkpoint, or a logdir (its latest checkpoint)")
    x.add_argument("--out", required=True, help="the folder to write (replaced as a whole)")

    pl = sub.add_parser("plot", help="learning curves of run directories")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--metric", default="episode_return_mean")
    pl.add_argument("--x", default="env_steps_sampled", choices=X_KEYS)
    pl.add_argument("--out", default="curves.png", help="the image to write (.png, .svg, .pdf)")

    ls = sub.add_parser("list", help="algorithms and environments available")
    for command in (t, e, x, pl, ls):  # SUPPRESS: a subcommand's default must not reset a --debug given before it
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set takes FIELD=VALUE, got {item!r}.")
        out[key.strip()] = value.strip()
    for flag, field in (
        ("env", "env"),
        ("num_workers", "num_workers"),
        ("seed", "seed"),
        ("mode", "mode"),
        ("num_seeds", "num_seeds"),
        ("pbt", "pbt"),
    ):
        if getattr(args, flag, None) is not None:
            out[field] = str(getattr(args, flag))
    if getattr(args, "sweep", None):
        field, sep, values = args.sweep.partition("=")
        try:
            numbers = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            numbers = []
        if not sep or not numbers:
            raise ConfigError(f"--sweep takes FIELD=V1,V2,... with numbers, got {args.sweep!r}.")
        out["sweep"] = json.dumps({field.strip(): numbers})
    return out


def _train(args: argparse.Namespace) -> int:
    from jaxflow.api.algorithm import Algorithm
    from jaxflow.api.loop import parse_stop, train
    from jaxflow.api.program import resolve_mode
    from jaxflow.api.ray_program import init_ray
    from jaxflow.api.registry import get_algorithm
    from jaxflow.api.spaces import env_spaces

    stop = parse_stop(args.stop) or {"training_iteration": 100.0}
    if args.resume:
        from jaxflow.api.restore import plan_restore, run_directory

        plan = plan_restore(args.resume, _overrides(args), from_strings=True)  # verified before Ray starts
        logdir = run_directory(args.resume)  # a checkpoint's folder continues the run it belongs to
        for _, why in plan.skipped:
            print(f"jaxflow: skipped {why}", flush=True)
        spec, config = plan.spec, plan.config
        mode = resolve_mode(config, spec)
        print(f"jaxflow: resuming {spec.name} from {plan.path}, {_describe(config, mode)}", flush=True)
        if mode == "ray":
            init_ray(args.address)
        algo = Algorithm.from_plan(plan)
    else:
        if args.multiagent:
            spec = get_algorithm("MULTIAGENT")
            config = with_overrides(load_config_file(spec.config_cls, args.multiagent), _overrides(args))
        elif args.algo:
            spec = get_algorithm(args.algo)
            config = with_overrides(spec.config_cls(), _overrides(args))  # validates before any actor starts
        else:
            raise ConfigError("train needs --algo NAME, --multiagent FILE or --resume LOGDIR.")
        mode = resolve_mode(config, spec)
        if spec.run.program is None:  # a standard program acts in config.env: its spaces are checked before Ray starts
            env_spaces(config, spec)
        if getattr(config, "model", None):  # the user's module is imported in the run; its name is checked now
            from jaxflow.networks.models import check_model

            check_model(config.model)
        logdir = args.logdir or os.path.join(
            "runs", f"{spec.name.lower()}-{config.env.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        claim_logdir(logdir, args.overwrite)  # a run there is refused (or replaced) before anything starts
        print(f"jaxflow: {spec.name} on {config.env}, {_describe(config, mode)}, logdir {logdir}", flush=True)
        if mode == "ray":
            init_ray(args.address)
        algo = Algorithm(config, spec)
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
        )
    finally:
        algo.stop()
    print(
        f"done: iteration {result['training_iteration']}, env steps {result['env_steps_sampled']:,}, "
        f"episode_return_mean {result['episode_return_mean']:.1f}, {result['time_s']:.1f}s; checkpoints in {logdir}",
        flush=True,
    )
    return 0


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


def _evaluate(args: argparse.Namespace) -> int:
    from jaxflow.api import checkpoint
    from jaxflow.api.algorithm import Algorithm, load_policy
    from jaxflow.api.registry import get_algorithm
    from jaxflow.rollout.evaluation import evaluate_policy

    ckpt = checkpoint.latest(args.checkpoint)
    if ckpt is not None and get_algorithm(checkpoint.load_meta(ckpt)["algorithm"]).run.program is not None:
        # A run with its own program (MAML, multi-agent) evaluates itself.
        algo = Algorithm.restore(ckpt)
        try:
            out = algo.evaluate(episodes=args.episodes, seed=args.seed)
        finally:
            algo.stop()
        print(f"{algo.config.env}: {json.dumps({k: v for k, v in out.items() if not isinstance(v, list)})}")
        return 0
    config, policy, params, normalizer = load_policy(args.checkpoint)
    out = evaluate_policy(config, policy, params, args.episodes, args.seed, normalizer, args.video)
    print(
        f"{config.env}: greedy return over {out['episodes']} episodes: mean {out['return_mean']:.2f}, std {out['return_std']:.2f}"
        + (f"; videos in {args.video}" if args.video else "")
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from jaxflow.api.export import export_policy

    print(f"jaxflow: exported the greedy policy to {export_policy(args.checkpoint, args.out)}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from jaxflow.api.plot import plot_runs

    plot_runs(args.runs, args.metric, args.x, args.out)
    print(f"jaxflow: {len(args.runs)} learning curve{'s' if len(args.runs) > 1 else ''} of {args.metric} in {args.out}")
    return 0


def _list() -> int:
    from jaxflow import envs
    from jaxflow.api.registry import algorithms_for_space, device_algorithms, list_algorithms, multiagent_algorithms
    from jaxflow.api.spec import ACTION_SPACES

    print("algorithms:", ", ".join(list_algorithms()))
    for space in ACTION_SPACES:
        print(f"for {space} action spaces:", ", ".join(algorithms_for_space(space)))
    print("with device mode (gymnax and brax envs):", ", ".join(device_algorithms()))
    print("for policies of multi-agent runs (--multiagent FILE):", ", ".join(multiagent_algorithms()))
    for kind in ("gymnasium", "gymnax", "brax", "multiagent"):
        ids = envs.list_envs(kind)
        print(f"{kind} environments ({len(ids)}):")
        print("  " + "\n  ".join(ids))
    tasks = envs.list_task_distributions()
    print(f"task distributions for MAML ({len(tasks)}):")
    print("  " + "\n  ".join(tasks))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = None
    try:
        args = _parser().parse_args(argv)
        if args.command == "train":
            check_train(args)
            parse_loggers(args.logger)  # names checked before anything starts
            return _train(args)
        if args.command == "evaluate":
            check_evaluate(args)
            return _evaluate(args)
        if args.command == "export":
            check_evaluate(args)
            return _export(args)
        if args.command == "plot":
            return _plot(args)
        return _list()
    except Exception as e:  # not SystemExit (--help), which must not import what user_errors() names
        if not isinstance(e, user_errors()) or (args is not None and args.debug):  # --debug: the traceback
            raise
        print(f"jaxflow: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
