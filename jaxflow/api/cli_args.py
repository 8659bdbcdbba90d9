"""The ``jaxflow`` command line's arguments: the parser (``train``'s and ``tune``'s flags in
:mod:`jaxflow.api.cli_flags`), the config fields ``train``'s flags set, the user's modules
(``--import``: imported by :mod:`jaxflow.api.user_modules`), and ``train --config FILE`` (read by
:mod:`jaxflow.api.run_file`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from jaxflow.api.cli_flags import train_arguments, tune_arguments
from jaxflow.api.outputs import PLOT_FORMATS
from jaxflow.api.plot import X_KEYS
from jaxflow.api.run_file import run_file_arguments
from jaxflow.api.user_errors import Parser, int_at_least, member_choice
from jaxflow.config.constants import MAX_EVALUATION_EPISODES, MAX_SEED
from jaxflow.config.fields import ConfigError

DISTRIBUTION = "jaxflow-rl"
"""The name jaxflow is installed under (``pip install jaxflow-rl``)."""

ENV_KINDS = ("gymnasium", "gymnax", "brax", "jaxlib", "multiagent", "tasks")
"""The kinds of environment ``jaxflow list --kind`` takes (``jaxflow.envs``' registry kinds, and
``tasks``: MAML's task distributions)."""

MEMBER_HELP = (
    "of a device-mode run of several members (--num-seeds, --sweep), the one to play: N, or best (the "
    "default where the checkpoint marks one: a --pbt run's member of highest recent return; else member 0)"
)
"""``--member``, which evaluate and export take."""

IMPORT_FLAG = {
    "action": "append",
    "default": [],
    "dest": "imports",
    "metavar": "MODULE",
    "help": "import a module of yours first (from the current directory or installed), e.g. one that "
    "registers environments or models; repeatable",
}
"""``--import``, which train, evaluate and export take."""

FIELD_FLAGS = {
    "env": "env",
    "num_workers": "num_workers",
    "seed": "seed",
    "mode": "mode",
    "num_seeds": "num_seeds",
    "pbt": "pbt",
    "sweep": "sweep",
}
"""``train``'s and ``tune``'s flags that set a config field: the flag's name -> the field's flat name."""

OVERWRITE_HELP = (
    "replace {what} if jaxflow wrote it earlier; any other existing path is refused, with or without this flag"
)
"""``--overwrite`` of evaluate, export and plot (train's replaces a run: :mod:`jaxflow.api.cli_flags`)."""


def parser() -> argparse.ArgumentParser:
    """The ``jaxflow`` command line's parser (its errors are :class:`UsageError`)."""
    p = Parser(prog="jaxflow", description="Accelerator-first reinforcement learning.")
    p.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (also accepted after the command)"
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train an algorithm (or resume a run)")
    train_arguments(t)
    t.add_argument("--import", **IMPORT_FLAG)  # type: ignore[arg-type]
    tu = sub.add_parser("tune", help="search an algorithm's settings with Ray Tune (ASHA, PBT), trials in parallel")
    tune_arguments(tu)
    e = sub.add_parser("evaluate", help="run a checkpoint's greedy policy")
    e.add_argument("--checkpoint", required=True, help="a checkpoint, or a logdir (its latest checkpoint)")
    e.add_argument(
        "--episodes",
        type=int_at_least(1, MAX_EVALUATION_EPISODES, "MAX_EVALUATION_EPISODES"),
        default=10,
        help=f"episodes to play, at most {MAX_EVALUATION_EPISODES:,} (a line every few seconds says how many are done)",
    )
    e.add_argument(
        "--seed",
        type=int_at_least(0, MAX_SEED, "MAX_SEED"),
        help=f"seeds episode k with SEED + k (0 to {MAX_SEED:,}; default: one apart from training's)",
    )
    e.add_argument(
        "--video",
        metavar="DIR",
        help="also record each episode as DIR/episode_<k>.mp4, with DIR/videos.json; DIR must be new or empty",
    )
    x = sub.add_parser("export", help="a checkpoint's greedy policy for JAX and numpy alone")
    x.add_argument("--checkpoint", required=True, help="a checkpoint, or a logdir (its latest checkpoint)")
    x.add_argument("--out", required=True, help="the folder to write: new or empty (see --overwrite)")
    for command in (e, x):
        command.add_argument("--member", type=member_choice, help=MEMBER_HELP)
    for command in (tu, e, x):
        command.add_argument("--import", **IMPORT_FLAG)  # type: ignore[arg-type]
    pl = sub.add_parser("plot", help="learning curves of run directories")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--metric", default="episode_return_mean")
    pl.add_argument("--x", default="env_steps_sampled", choices=X_KEYS)
    pl.add_argument(
        "--out",
        default="curves.png",
        help=f"the image to write, a new file ({', '.join(PLOT_FORMATS)}; see --overwrite)",
    )
    for command, what in ((e, "--video's folder of videos"), (x, "--out's export"), (pl, "--out's plot")):
        command.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP.format(what=what))
    ls = sub.add_parser("list", help="algorithms, and the environments they can train with each one's spaces")
    ls.add_argument("--algo", help="only the environments this algorithm can train")
    ls.add_argument("--kind", action="append", choices=ENV_KINDS, help="only this kind of environment; repeatable")
    ls.add_argument("--all", action="store_true", help="every id, also those hidden by default, saying why")
    ls.add_argument("--refresh", action="store_true", help="make the listing again, not read the cached one")
    ls.add_argument(
        "--fields", action="store_true", help="with --algo NAME: its config fields, their groups, defaults and meanings"
    )
    for command in (t, tu, e, x, pl, ls):  # SUPPRESS: a subcommand's default must not reset a --debug given before it
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    return p


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """The config fields ``train``'s flags set: ``--set`` items, then the flags that name a field.
    A field set twice to different values (``--num-workers 0 --set num_workers=-2``, or two
    ``--set`` items) is refused: whichever won, the other value would be ignored unchecked."""
    out: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set takes FIELD=VALUE, got {item!r}.")
        _refuse_twice(out, f"--set {item.strip()}", key.strip(), value.strip())
        out[key.strip()] = value.strip()
    for flag, field in FIELD_FLAGS.items():
        value = getattr(args, flag, None)
        if value is None or flag == "sweep":
            continue
        _refuse_twice(out, f"--{flag.replace('_', '-')} {value}", field, str(value))
        out[field] = str(value)
    if getattr(args, "sweep", None):
        field, sep, values = args.sweep.partition("=")
        try:
            numbers = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            numbers = []
        if not sep or not numbers:
            raise ConfigError(f"--sweep takes FIELD=V1,V2,... with numbers, got {args.sweep!r}.")
        _refuse_twice(out, f"--sweep {args.sweep}", "sweep", json.dumps({field.strip(): numbers}))
        out["sweep"] = json.dumps({field.strip(): numbers})
    return out


def _refuse_twice(given: dict[str, str], what: str, field: str, value: str) -> None:
    """Raises :class:`ConfigError` where ``given`` sets ``field`` (by its flat or dotted name)
    to a value other than ``value`` (numbers compared as numbers: ``2`` and ``2.0`` agree)."""
    for key, text in given.items():
        if _leaf(key) == _leaf(field) and text != value and _number(text) != _number(value):
            earlier = f"--set {key}={text}"
            raise ConfigError(f"{earlier} and {what} set {_leaf(field)} to different values; give it once.")


def _leaf(name: str) -> str:
    """A field's flat name: ``num_workers`` of ``rollout.num_workers``."""
    return name.rpartition(".")[2]


def _number(text: str) -> float | str:
    """``text`` as a number where it is one (``nan`` never equals itself, so it never agrees), else itself."""
    try:
        return float(text)
    except ValueError:
        return text


def new_run(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(spec, config)`` of the new run ``train``'s arguments describe, the config validated."""
    from jaxflow.api.registry import get_algorithm
    from jaxflow.config.parsing import load_config_file, with_overrides

    if args.multiagent:
        spec = get_algorithm("MULTIAGENT")
        return spec, with_overrides(load_config_file(spec.config_cls, args.multiagent), overrides(args))
    if args.algo:
        spec = get_algorithm(args.algo)
        return spec, with_overrides(spec.config_cls(), overrides(args))
    raise ConfigError("train needs --algo NAME, --multiagent FILE, --config FILE or --resume LOGDIR.")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line's arguments; ``train --config FILE`` reads the file's flags first.

    >>> args = parse(["train", "--algo", "PPO", "--set", "lr=1e-3"])
    >>> args.algo, overrides(args)
    ('PPO', {'lr': '1e-3'})
    """
    argv = list(argv)
    args = parser().parse_args(argv)
    if args.command != "train" or not args.config:
        return args
    stops, fields = _given(args)
    from_file = [
        a
        for flag in run_file_arguments(args.config, train_parser())
        if not _replaced(flag, stops, fields)
        for a in flag
    ]
    at = argv.index("train") + 1
    return parser().parse_args([*argv[:at], *from_file, *argv[at:]])


def _given(args: argparse.Namespace) -> tuple[set[str], set[str]]:
    """The stop keys and the config fields (flat names) the command line sets itself."""
    stops = {item.partition("=")[0].strip() for item in args.stop}
    fields = {_leaf(item.partition("=")[0].strip()) for item in args.set}
    return stops, fields | {field for flag, field in FIELD_FLAGS.items() if getattr(args, flag, None) is not None}


def _replaced(flag: tuple[str, ...], stops: set[str], fields: set[str]) -> bool:
    """Whether a run file's ``flag`` (with its value) sets what the command line sets too: the
    command line's replaces it (a ``--set num_workers=0`` the file's ``num_workers``, and so on)."""
    name, value = flag[0].lstrip("-").replace("-", "_"), flag[1] if len(flag) > 1 else ""
    if name == "stop":
        return value.partition("=")[0].strip() in stops
    if name == "set":
        return _leaf(value.partition("=")[0].strip()) in fields
    return FIELD_FLAGS.get(name) in fields


def _version() -> str:
    """The installed distribution's version (``jaxflow --version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def train_parser() -> argparse.ArgumentParser:
    """``jaxflow train``'s own parser (what run files are checked against)."""
    subparsers = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["train"]
