"""The flags of ``jaxflow train`` and ``jaxflow tune``, group by group (the rest of the command
line is :mod:`jaxflow.api.cli_args`').

>>> import argparse
>>> t = argparse.ArgumentParser()
>>> train_arguments(t)
>>> args = t.parse_args(["--algo", "PPO", "--mode", "device", "--num-seeds", "4"])
>>> args.algo, args.mode, args.num_seeds, args.checkpoint_every, args.logger
('PPO', 'device', 4, 10, 'tensorboard,jsonl')
"""

from __future__ import annotations

import argparse

from jaxflow.api.loggers import DEFAULT_LOGGERS, LOGGERS
from jaxflow.api.retention import DEFAULT_KEEP
from jaxflow.api.stops import DEFAULT_ITERATIONS
from jaxflow.api.user_errors import int_at_least

MODES = ("auto", "ray", "device")
"""``--mode``'s choices: Ray rollout workers, device mode, or whichever the env and algorithm allow."""


ADDRESS_HELP = (
    "the Ray cluster to join: HOST:PORT, ray://HOST:PORT, or auto (the one running on this machine); "
    "default: the one $RAY_ADDRESS names, else a local Ray of the command's own"
)
"""``--address`` of train and tune."""


def train_arguments(t: argparse.ArgumentParser) -> None:
    """``jaxflow train``'s flags (the parser adds ``--import`` and ``--debug``): the run file, what
    to train, where the run goes, how many agents it trains and where its results go."""
    t.add_argument(
        "--config",
        metavar="FILE",
        help="a run's flags from a JSON file (e.g. examples/tuned/dqn-cartpole.json); flags given here override it",
    )
    _algorithm_arguments(t)
    _run_directory_arguments(t)
    _agents_arguments(t)
    _output_arguments(t)


def _algorithm_arguments(t: argparse.ArgumentParser) -> None:
    """The flags of what to train, which ``train`` and ``tune`` share: algorithm, env, stop and settings."""
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
        "episode_return_mean, time_s, evaluation/episode_return_mean with --set evaluation_interval=N); "
        f"train without it stops at training_iteration={DEFAULT_ITERATIONS}",
    )
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field, by its flat (lr) or dotted (optimizer.lr) name; repeatable",
    )


def tune_arguments(t: argparse.ArgumentParser) -> None:
    """``jaxflow tune``'s flags: what each trial trains (as ``train``'s), what is searched, how."""
    _algorithm_arguments(t)
    t.add_argument("--mode", choices=MODES, help="each trial's mode (see train --mode)")
    t.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="FIELD=KIND(...)",
        help="a searched field: loguniform(LOW,HIGH), uniform(LOW,HIGH), randint(LOW,HIGH), choice(V1,V2,...) "
        "or grid_search(V1,V2,...); repeatable",
    )
    t.add_argument("--num-samples", type=int_at_least(1), default=1, help="trials drawn (each grid point this often)")
    t.add_argument("--scheduler", default="fifo", help="fifo, asha (early stopping) or pbt (population-based training)")
    t.add_argument(
        "--scheduler-interval",
        type=int_at_least(1),
        default=1,
        help="iterations between the scheduler's decisions: ASHA's first cut (then 2N, 4N, ...), PBT's perturbations",
    )
    t.add_argument("--checkpoint-every", type=int_at_least(1), default=1, help="iterations between trial checkpoints")
    t.add_argument("--max-failures", type=int_at_least(0), default=1, help="restarts of a trial whose process dies")
    t.add_argument(
        "--logdir", help="the experiment's directory (new or empty): trials, checkpoints, best_checkpoint.json"
    )
    t.add_argument("--address", help=ADDRESS_HELP)


def _run_directory_arguments(t: argparse.ArgumentParser) -> None:
    """``jaxflow train``'s flags of where a run goes, how it resumes and which checkpoints it keeps."""
    t.add_argument(
        "--logdir",
        help="where progress, TensorBoard events and checkpoints go (a new or empty directory, or see --overwrite)",
    )
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the jaxflow run in --logdir (its progress, config, events and checkpoints, nothing else); "
        "without it, a logdir that holds a run is refused, and a logdir holding anything else always is",
    )
    t.add_argument(
        "--resume",
        metavar="LOGDIR",
        help="continue the run in LOGDIR (or at a storage URI) from its last checkpoint that verifies",
    )
    t.add_argument(
        "--storage",
        metavar="URI",
        help="copy the run there after every checkpoint and at the end (s3://bucket/run, or any URI fsspec "
        "or pyarrow.fs opens); only the driver reaches it; resume with --resume URI",
    )
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


def _agents_arguments(t: argparse.ArgumentParser) -> None:
    """``jaxflow train``'s flags of how the run trains and how many agents: its mode, seeds,
    sweep, PBT, or a multi-agent run."""
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


def _output_arguments(t: argparse.ArgumentParser) -> None:
    """``jaxflow train``'s flags of where results go besides the run directory, and which Ray
    cluster runs it."""
    t.add_argument(
        "--logger",
        default=",".join(DEFAULT_LOGGERS),
        help=f"where results go besides the console: a comma-separated list out of {', '.join(LOGGERS)}; "
        "progress.jsonl (what `jaxflow plot` reads) is written whatever the list (wandb and mlflow need their "
        "extras: pip install 'jaxflow-rl[wandb]', and are checked before the run starts: W&B online needs "
        "`wandb login` or WANDB_API_KEY, else WANDB_MODE=offline)",
    )
    t.add_argument("--address", help=ADDRESS_HELP)
    t.add_argument("--quiet", action="store_true", help="no progress output")
