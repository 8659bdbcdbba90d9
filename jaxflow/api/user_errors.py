"""What a user can get wrong on the ``jaxflow`` command line, found before anything starts
and reported in one line: the errors that count as the user's, argparse raising them, the
checks of flags given together, and a probe of ``--address``."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from jaxflow.config.fields import ConfigError

RAY_OWN_ADDRESSES = ("auto", "local")
"""``--address`` values Ray resolves itself (a running cluster found on this machine, a new local one)."""

ADDRESS_PROBE_TIMEOUT_S = 5.0
"""How long ``--address HOST:PORT`` may take to accept a connection before the run is refused:
``ray.init`` retries an address where nothing listens for minutes."""


class UsageError(ConfigError):
    """A command line argparse cannot parse: reported in one line like every user error."""


class Parser(argparse.ArgumentParser):
    """argparse, its errors raised as :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> Any:
        command = self.prog.removeprefix("jaxflow").strip()
        raise UsageError(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`).")


def int_at_least(low: int, high: int | None = None, high_name: str = "") -> Any:
    """An argparse ``type``: an int ``>= low``, and ``<= high`` where given (``high_name``: the
    named constant it is, which the refusal names).

    >>> int_at_least(1, 9, "MAX")("10")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer from 1 to 9 (MAX), got '10'
    """
    allowed = f">= {low}" if high is None else f"from {low} to {high}" + (f" ({high_name})" if high_name else "")

    def parse(text: str) -> int:
        try:
            value: int | None = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text!r}")
        return value

    return parse


def check_train(args: argparse.Namespace) -> None:
    """What ``train``'s flags get wrong together, and an unreachable ``--address``, before anything starts."""
    if args.resume and (args.algo or args.multiagent):
        raise ConfigError("--resume continues a run with its own algorithm; leave out --algo and --multiagent.")
    if args.algo and args.multiagent:
        raise ConfigError("--multiagent FILE names each policy's algorithm; leave out --algo.")
    if args.resume and args.overwrite:
        raise ConfigError("--overwrite replaces a run and --resume continues one; give one of them.")
    if args.address is not None:
        check_address(args.address)


def check_address(address: str) -> None:
    """Refuses a Ray ``address`` that is no ``HOST:PORT`` (:class:`ConfigError`) or where nothing
    accepts a connection within :data:`ADDRESS_PROBE_TIMEOUT_S` (:class:`ConnectionError`)."""
    if address in RAY_OWN_ADDRESSES:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 2**16):
        raise ConfigError(
            f"--address {address!r}: expected HOST:PORT or ray://HOST:PORT (or auto), e.g. 10.0.0.5:6379."
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=ADDRESS_PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise ConnectionError(
            f"--address {address!r}: no Ray cluster answers there ({e.strerror or e}); start one with "
            "`ray start --head`, or leave out --address for a local Ray."
        ) from e


def member_choice(text: str) -> int | str:
    """An argparse ``type`` for ``--member``: ``best`` or an int ``>= 0``."""
    if text == "best" or (text.isdigit() and text.isascii()):
        return text if text == "best" else int(text)
    raise argparse.ArgumentTypeError(f"must be best or an integer >= 0, got {text!r}")


def check_evaluate(args: argparse.Namespace) -> None:
    """A ``--checkpoint`` that does not exist is named as such (an existing one, or a storage
    URI, is checked as it loads)."""
    if "://" not in args.checkpoint and not os.path.exists(args.checkpoint):
        raise ConfigError(
            f"--checkpoint {args.checkpoint!r}: no such file or directory (a checkpoint or a run's logdir)."
        )


def check_outputs(args: argparse.Namespace) -> None:
    """The path an evaluate, export or plot command writes, checked before anything starts: new,
    an empty folder, or with ``--overwrite`` an earlier output of jaxflow's
    (:func:`~jaxflow.api.outputs.claim_output`); train's and tune's logdirs are checked where
    their runs claim them."""
    from jaxflow.api.outputs import EXPORT, PLOT, VIDEOS, claim_output

    kind = {"export": EXPORT, "plot": PLOT}.get(args.command)
    if kind is not None:
        claim_output(args.out, kind, args.overwrite)
    elif args.command == "evaluate" and args.video:
        claim_output(args.video, VIDEOS, args.overwrite)


def user_errors() -> tuple[type[Exception], ...]:
    """The errors a user causes, each reported as one line ``jaxflow: error: ...`` with exit
    status 2: invalid input (:class:`ConfigError`, which config files, ``--set``, ``--stop``,
    run directories, argparse and checkpoints that cannot be restored, ``CheckpointError``,
    raise), an unknown environment id or one of another kind, and a Ray cluster that cannot be
    reached. Anything else is jaxflow's own fault and keeps its traceback."""
    from jaxflow import envs

    return (ConfigError, envs.UnknownEnvError, envs.EnvKindError, ConnectionError)


def one_line(error: BaseException) -> str:
    """The error's message on one line (a message of several lines joined by " | ")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " | ".join(lines) or type(error).__name__
