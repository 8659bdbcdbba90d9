"""A run directory: what marks one, how a new run claims it, how a resumed run's logs continue.

A new run never writes over an old one silently, nor among other files: :func:`claim_logdir`
takes a directory that does not exist or is empty, and replaces a run only when told to and
only where jaxflow recognises the run as its own (:func:`is_jaxflow_run`), removing only
that run's files (the rule of :mod:`jaxflow.api.outputs`). A run resumed from a checkpoint
at iteration N trains iterations N+1, ... again, so :func:`truncate_progress` drops the
rows it is about to write again. A run that fails before its first iteration leaves nothing
behind (:class:`NewRunFiles`): only what it wrote is removed, and the logdir where it created it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from typing import Any

from jaxflow.api.outputs import OutputKind, claim_output, read_json
from jaxflow.config.fields import ConfigError

PROGRESS = "progress.jsonl"
CONFIG = "config.json"
CHECKPOINT_META = "meta.json"
"""A checkpoint's description (:mod:`jaxflow.api.checkpoint`), which names its algorithm."""
ERROR_LOG = "error.log"
"""The tracebacks of a run's failures, appended one after another (:mod:`jaxflow.api.failures`)."""

_RUN_FILE = re.compile(
    r"^(progress\.jsonl(\.tmp)?"  # progress.jsonl and a rewrite's leftover
    r"|config\.json"
    r"|error\.log"  # the tracebacks of the run's failures (api/failures.py)
    r"|\.?best_checkpoint\.json(\.tmp)?"  # which checkpoint scored best (api/retention.py)
    r"|events\.out\.tfevents\..*"  # TensorBoard
    r"|wandb|mlruns"  # the trackers' local files (W&B offline runs, MLflow's file store)
    r"|(\.(tmp|old)-)?checkpoint_\d+(-[0-9a-f]+)?)$"  # checkpoints and their interrupted writes and replaces
)
"""The names of the files and folders jaxflow writes in a run directory, and only those."""


def is_checkpoint_name(name: str) -> bool:
    """True for a checkpoint's folder name, ``checkpoint_<iteration>``."""
    return re.fullmatch(r"checkpoint_\d+", name) is not None


def is_run_file(name: str) -> bool:
    """True for the name of one of jaxflow's own files or folders of a run."""
    return _RUN_FILE.match(name) is not None


def run_files(logdir: str) -> list[str]:
    """The names of jaxflow's own files and folders of a run in ``logdir``, sorted ([] if none)."""
    if not os.path.isdir(logdir):
        return []
    return sorted(name for name in os.listdir(logdir) if is_run_file(name))


def is_jaxflow_run(logdir: str) -> bool:
    """True where ``logdir`` holds a run jaxflow wrote: its ``config.json`` (the algorithm and
    its config, written first by every run) or a checkpoint's ``meta.json`` naming an
    algorithm (a folder ``Algorithm.save`` wrote)."""
    if _names_algorithm(os.path.join(logdir, CONFIG)):
        return True
    return any(
        is_checkpoint_name(name) and _names_algorithm(os.path.join(logdir, name, CHECKPOINT_META))
        for name in os.listdir(logdir)
    )


def _names_algorithm(path: str) -> bool:
    return names_algorithm(read_json(path))


def names_algorithm(saved: Any) -> bool:
    """True for what a run's ``config.json`` or a checkpoint's ``meta.json`` holds: an object
    naming an algorithm and its config."""
    return isinstance(saved, dict) and isinstance(saved.get("algorithm"), str) and isinstance(saved.get("config"), dict)


RUN = OutputKind(
    "logdir",
    "a run",
    folder=True,
    earlier=is_jaxflow_run,
    whole=False,
    hint="continue it with --resume {path} (Algorithm.restore), pick a new directory, or replace it with "
    "--overwrite (overwrite=True).",
)
"""A run directory: a new run's files are written one by one into it."""


def claim_logdir(logdir: str, overwrite: bool = False) -> None:
    """Makes ``logdir`` ready for a new run, or raises :class:`ConfigError`.

    A directory that does not exist or is empty is taken. One that holds a jaxflow run
    (:func:`is_jaxflow_run`) is refused unless ``overwrite``, which removes that run's files
    (:func:`run_files`) and nothing else. Any other (files of someone else's, the current
    folder with its files) is refused even with ``overwrite``: it is not jaxflow's to clear.
    """
    claim_output(logdir, RUN, overwrite)
    for name in run_files(logdir):  # only a jaxflow run's, after the claim: nothing else is removed
        _remove(os.path.join(logdir, name))
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"logdir {logdir!r} cannot be created ({e.strerror or e}).") from e
    if not os.access(logdir, os.W_OK):
        raise ConfigError(f"logdir {logdir!r} is not writable.")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def check_logdir(logdir: str, overwrite: bool = False) -> None:
    """Raises the :class:`ConfigError` :func:`claim_logdir` would, changing nothing: for a
    command to refuse a logdir before anything starts, and claim it once its run is built."""
    claim_output(logdir, RUN, overwrite)  # a new path's nearest existing folder is checked writable too
    if os.path.isdir(logdir) and not os.access(logdir, os.W_OK):
        raise ConfigError(f"logdir {logdir!r} is not writable.")


def missing_from(path: str) -> str | None:
    """The topmost folder of ``path`` (as an absolute path) that does not exist yet, the one
    creating ``path`` would create first; None where ``path`` exists."""
    path = os.path.abspath(path)
    if os.path.lexists(path):
        return None
    while not os.path.lexists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


class NewRunFiles:
    """What a run writes into its logdir from now on, taken back by :meth:`remove` where the
    run fails before its first iteration, so the same command can start it again.

    ``created``: the topmost folder of the logdir that this run created (:func:`missing_from`,
    before the logdir was claimed), or None where the logdir was there already.
    """

    def __init__(self, logdir: str, created: str | None) -> None:
        self.logdir, self.created = logdir, created
        self.before = set(os.listdir(logdir))

    def remove(self) -> list[str]:
        """Removes the run files (:func:`run_files`) that were not in the logdir when this was
        made, then the folders this run created, each only where nothing is left in it; nothing
        else (not a file that was there, nor one of another name). Returns the names removed."""
        new = [name for name in run_files(self.logdir) if name not in self.before]
        for name in new:
            with contextlib.suppress(OSError):  # the run's own failure matters more than a file left over
                _remove(os.path.join(self.logdir, name))
        folder = os.path.abspath(self.logdir)
        with contextlib.suppress(OSError):  # as above
            while self.created is not None and os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
                if folder == self.created:
                    break
                folder = os.path.dirname(folder)
        return new


def truncate_progress(logdir: str, iteration: int) -> int:
    """Drops the rows of ``progress.jsonl`` past ``iteration`` (those a run resumed from its
    checkpoint at ``iteration`` writes again) and any row cut short by a killed run; the file
    is rewritten whole or not at all (a temporary file renamed over it). Returns the rows dropped."""
    path = os.path.join(logdir, PROGRESS)
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    keep = [line for line in lines if _kept(line, iteration)]
    if len(keep) == len(lines):
        return 0
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in keep))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(lines) - len(keep)


def _kept(line: str, iteration: int) -> bool:
    try:
        row: Any = json.loads(line)
    except json.JSONDecodeError:  # the last row of a run killed while writing it
        return False
    done = row.get("training_iteration") if isinstance(row, dict) else None
    return not isinstance(done, (int, float)) or done <= iteration
