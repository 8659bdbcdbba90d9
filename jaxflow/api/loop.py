"""The training loop shared by the CLI and notebooks: writers, checkpoints (stop conditions: :mod:`jaxflow.api.stops`)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from jaxflow.api import checkpoint, interrupts
from jaxflow.api.algorithm import Algorithm
from jaxflow.api.failures import record_failure
from jaxflow.api.logdir import CONFIG, NewRunFiles, claim_logdir, missing_from, truncate_progress
from jaxflow.api.loggers import DEFAULT_LOGGERS, MLflowWriter, WandbWriter, parse_loggers
from jaxflow.api.retention import DEFAULT_KEEP, prune_checkpoints
from jaxflow.api.stops import EVALUATION, STOP_KEYS, check_ahead, check_reported, check_stop, parse_stop, should_stop
from jaxflow.api.storage import Storage
from jaxflow.api.tracker_checks import check_trackers, starting
from jaxflow.api.user_errors import one_line
from jaxflow.api.user_modules import IMPORTS_KEY, imported_modules
from jaxflow.api.writers import ConsoleProgress, JsonLinesWriter, TensorBoardWriter, tensorboard_step
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import to_json_dict

__all__ = ["STOP_KEYS", "parse_stop", "should_stop", "train"]  # the stop conditions' names, as they were here


def train(
    algo: Algorithm,
    stop: Mapping[str, float],
    logdir: str | None = None,
    checkpoint_every: int = 10,
    verbose: bool = True,
    overwrite: bool = False,
    loggers: Sequence[str] = DEFAULT_LOGGERS,
    keep_checkpoints: int = DEFAULT_KEEP,
    storage: str | Storage | None = None,
) -> dict[str, Any]:
    """Trains until a stop condition holds; logs to ``logdir`` and checkpoints there
    every ``checkpoint_every`` iterations (0: only at the end) and at the end. A result of
    several iterations (device mode) checkpoints when it passes a multiple of ``checkpoint_every``.

    A new run (``algo`` at iteration 0) refuses a ``logdir`` that holds a run, unless
    ``overwrite`` replaces that run's files (a new run's option only). A restored run (iteration N > 0) continues the
    logs there: rows of ``progress.jsonl`` past N are dropped and TensorBoard purges the steps
    after the checkpoint's, so every iteration and step is logged once. ``loggers`` (out of
    :data:`~jaxflow.api.loggers.LOGGERS`, checked before ``logdir`` is touched:
    :func:`~jaxflow.api.tracker_checks.check_trackers`) choose where results go besides the
    console and ``progress.jsonl``, which is always written. After
    each save only the newest ``keep_checkpoints`` checkpoints and the best one stay (0: all;
    see :mod:`~jaxflow.api.retention`). ``storage`` (a URI or a :class:`~jaxflow.api.storage.Storage`)
    receives a copy of ``logdir``'s run after every checkpoint and at the end; a new run
    refuses a storage that holds one unless ``overwrite``.

    ``stop`` is checked as the command line checks it: a key the run never reports (an
    ``evaluation/`` key without ``evaluation_interval``) and a bound ``algo`` has reached are refused.

    Called in the main thread, a SIGINT (Ctrl-C) or SIGTERM lets the iteration in flight finish,
    saves it, closes the writers and raises :class:`~jaxflow.api.interrupts.TrainingInterrupted`
    (a ``KeyboardInterrupt``) naming the checkpoint; a second signal stops at once, unsaved
    (:mod:`~jaxflow.api.interrupts`). A failure's traceback is appended to ``logdir``'s ``error.log``;
    a failure before the first iteration starts (opening the writers) leaves nothing in ``logdir``.
    """
    loggers = _checked_arguments(algo, stop, loggers, checkpoint_every, keep_checkpoints, storage, logdir)
    store = Storage(storage) if isinstance(storage, str) else storage
    if store is not None and algo.iteration == 0:
        store.claim(overwrite)  # before the local logdir is touched: a refused run changes nothing
    writers: list[Any] = _open_writers(algo, logdir, overwrite, loggers, verbose) if logdir else []
    if verbose:
        writers.append(ConsoleProgress(stop))
    run = _Run(algo, logdir, writers, keep_checkpoints, store)
    with interrupts.deferred(run.announce) as caught:
        try:
            result = run.until(stop, checkpoint_every, caught)
        except KeyboardInterrupt:  # a second signal: the iteration in flight is not saved
            if caught.again is None:
                raise  # not one of the deferred handler's (raised by the user's own code)
            run.push = False  # at once: no upload either
            name = interrupts.signal_name(caught.again)
            raise run.interrupted(caught.again, f"stopped at once by a second {name}") from None
        except Exception as e:
            if logdir:
                record_failure(logdir, e, algo.iteration)
            if caught.signum is None:
                raise
            raise run.interrupted(caught.signum, f"the iteration in flight failed ({one_line(e)})") from e
        finally:
            run.close()
    if caught.signum is not None and not run.finished:
        raise run.interrupted(caught.signum)
    return result


class _Run:
    """One :func:`train` call's loop: its writers, its saves and what it says when a signal stops it."""

    def __init__(
        self, algo: Algorithm, logdir: str | None, writers: list[Any], keep: int, store: Storage | None
    ) -> None:
        self.algo, self.logdir, self.writers, self.keep, self.store = algo, logdir, writers, keep, store
        self.saved_at = algo.iteration  # a resumed run's checkpoint is at its iteration
        self.saved: str | None = None  # the checkpoint this call wrote last
        self.finished, self.push, self.in_flight = False, True, False

    def until(self, stop: Mapping[str, float], every: int, caught: interrupts.Caught) -> dict[str, Any]:
        """Trains until ``stop`` holds or a signal is ``caught``, saving every ``every``
        iterations, then saves the last iteration (unless just saved, or nothing was trained)."""
        result: dict[str, Any] = {}
        while caught.signum is None:
            self.in_flight = True
            result = self.algo.train()
            self.finished = should_stop(result, stop)
            if self.finished or caught.signum is not None:  # the last result: evaluations still playing reported
                result = _finish_evaluations(self.algo, result, stop)
            self.in_flight = False
            for w in self.writers:
                w.write(result)
            if self.finished:
                break
            due = every and result["training_iteration"] // every > self.saved_at // every
            if self.logdir and due and caught.signum is None:  # once caught, the save after the loop
                self.save()
        if self.logdir and self.algo.iteration not in (0, self.saved_at):
            self.save()
        return result

    def save(self) -> None:
        assert self.logdir is not None
        self.saved = _save(self.algo, self.logdir, self.writers, self.keep, self.store)
        self.saved_at = self.algo.iteration

    def close(self) -> None:
        """Closes the writers, and copies the run to its storage: the final checkpoint, and the
        logs of a run that failed too."""
        for w in self.writers:
            w.close()
        if self.store is not None and self.logdir and self.push:
            self.store.push(self.logdir)

    def announce(self, signum: int) -> str:
        """What the first signal's handler says, at once: what happens next."""
        if self.in_flight:
            then = "finishing the iteration in flight, then " + ("saving it" if self.logdir else "stopping")
        else:
            then = f"saving iteration {self.algo.iteration}" if self.logdir else "stopping"
        then += "" if self.logdir else " (no logdir: nothing is saved)"
        again = "Ctrl-C" if signum == signal.SIGINT else interrupts.signal_name(signum)
        return f"jaxflow: {interrupts.signal_name(signum)}: {then}; {again} again stops at once"

    def interrupted(self, signum: int, why: str = "") -> interrupts.TrainingInterrupted:
        """The :class:`~jaxflow.api.interrupts.TrainingInterrupted` that ends this run: one line
        naming the newest checkpoint and how to continue from it."""
        name, at = interrupts.signal_name(signum), self.algo.iteration
        saved = self.saved is not None and self.saved_at == at
        newest = self.saved if saved else _newest_checkpoint(self.logdir)
        if saved:
            told = f"interrupted by {name}: checkpoint {newest} written at iteration {at}"
        else:
            told = f"interrupted by {name} at iteration {at}" + (f", {why}" if why else "")
            if not self.logdir:
                told += "; no logdir, so no checkpoint"
            else:
                told += f"; the newest checkpoint is {newest}" if newest else "; no checkpoint was written"
        if newest and self.logdir:
            told += f"; continue with --resume {self.logdir} (Algorithm.restore)"
        return interrupts.TrainingInterrupted(signum, told, at, newest, saved)


def _finish_evaluations(algo: Algorithm, result: dict[str, Any], stop: Mapping[str, float]) -> dict[str, Any]:
    """The run's last ``result`` with the evaluations still playing reported under
    ``evaluations``; a run whose stop conditions read an evaluation keeps as ``evaluation``
    the one they were judged on (one stopped at ``evaluation/episode_return_mean=400`` ends on
    a row whose ``evaluation`` met it, whatever later policies scored), any other the newest."""
    judged = result.get("evaluation")
    result = algo.finish_evaluations(result)
    if judged is not None and any(key.startswith(EVALUATION) for key in stop):
        result["evaluation"] = judged
    return result


def _newest_checkpoint(logdir: str | None) -> str | None:
    """The newest checkpoint folder in ``logdir`` (unverified: said, not loaded), or None."""
    found = checkpoint.candidates(logdir) if logdir else []
    return found[0] if found else None


def _checked_arguments(
    algo: Algorithm,
    stop: Mapping[str, float],
    loggers: Sequence[str],
    checkpoint_every: int,
    keep_checkpoints: int,
    storage: str | Storage | None,
    logdir: str | None,
) -> Sequence[str]:
    """Checks :func:`train`'s arguments in their order, each refusal a one-line
    :class:`ConfigError`; returns the ``loggers`` parsed."""
    if not stop:
        raise ConfigError(f"train() needs at least one stop condition out of {list(STOP_KEYS)}.")
    check_stop(stop)
    check_reported(stop, algo.config)  # as the command line checks: a key never reported would train forever
    check_ahead(stop, algo.context.counters, f"this Algorithm, at iteration {algo.iteration}")
    parsed = parse_loggers(",".join(loggers)) if loggers else ()
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be an int >= 0 (0: at the end only), got {checkpoint_every!r}.")
    if isinstance(keep_checkpoints, bool) or not isinstance(keep_checkpoints, int) or keep_checkpoints < 0:
        raise ConfigError(f"keep_checkpoints must be an int >= 0 (0: all), got {keep_checkpoints!r}.")
    if storage is not None and not logdir:
        raise ConfigError("train(storage=...) copies a logdir there: give a logdir too.")
    if logdir:  # the trackers write only a run with a logdir
        check_trackers(parsed)
    return parsed


def _save(algo: Algorithm, logdir: str, writers: Sequence[Any], keep: int, store: Storage | None = None) -> str:
    """Saves a checkpoint (returned), hands it to the trackers, prunes the old ones, uploads the run."""
    path = algo.save(logdir)
    for w in writers:
        if hasattr(w, "checkpoint"):  # trackers keep checkpoints as artifacts
            w.checkpoint(path)
    prune_checkpoints(logdir, keep)
    if store is not None:
        store.push(logdir)
    return path


def _open_writers(algo: Algorithm, logdir: str, overwrite: bool, loggers: Sequence[str], verbose: bool) -> list[Any]:
    """The run's writers in ``logdir`` (claimed for a new run, continued for a restored one) and,
    where ``verbose``, a line for each tracker saying where it writes. A failure here, before
    the first iteration, takes back what the run wrote in ``logdir``, and ``logdir`` itself where
    the run created it (:class:`~jaxflow.api.logdir.NewRunFiles`), so the same run can start again."""
    created = missing_from(logdir)
    purge_step = _claim(algo, logdir, overwrite)
    written = NewRunFiles(logdir, created)
    try:
        writers = _log_writers(algo, logdir, loggers, purge_step)
    except BaseException:
        written.remove()
        raise
    for w in writers if verbose else ():
        if hasattr(w, "where"):  # the trackers: a W&B run's URL or folder, an MLflow run's store and id
            print(f"jaxflow: {w.where}", flush=True)
    return writers


def _claim(algo: Algorithm, logdir: str, overwrite: bool) -> int | None:
    """Claims ``logdir`` for a new run, or continues a restored run's logs there; returns the
    TensorBoard step to purge from (a restored run's), else None."""
    purge_step = None
    if algo.iteration and overwrite:  # its checkpoints may be the ones overwrite would remove
        raise ConfigError(
            f"overwrite=True starts a new run in {logdir!r}; this algorithm continues one at iteration "
            f"{algo.iteration} (train it into its own run's logdir, or a new one)."
        )
    if algo.iteration == 0:
        claim_logdir(logdir, overwrite)
    else:
        os.makedirs(logdir, exist_ok=True)
        truncate_progress(logdir, algo.iteration)
        # The restored step was written before the checkpoint; the next result's is later.
        purge_step = tensorboard_step(algo.context.counters) + 1
    return purge_step


def _log_writers(algo: Algorithm, logdir: str, loggers: Sequence[str], purge_step: int | None) -> list[Any]:
    """Writes ``config.json`` and opens the writers: progress.jsonl's always (what ``jaxflow plot``
    reads), then the other ``loggers``' in order; those opened are closed if a later one fails."""
    removed = checkpoint.remove_unfinished(logdir)  # no save of this logdir is under way before its run starts
    if removed:
        print(
            f"jaxflow: removed {len(removed)} unfinished checkpoint save(s) in {logdir}: {', '.join(removed)}",
            file=sys.stderr,
        )
    saved = {"algorithm": algo.spec.name, "config": to_json_dict(algo.config), IMPORTS_KEY: imported_modules()}
    with open(os.path.join(logdir, CONFIG), "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=1)
    make = {
        "jsonl": lambda: JsonLinesWriter(logdir),
        "tensorboard": lambda: TensorBoardWriter(logdir, purge_step),
        "wandb": lambda: WandbWriter(logdir, saved),
        "mlflow": lambda: MLflowWriter(logdir, saved),
    }
    writers: list[Any] = []
    try:
        for name in dict.fromkeys(("jsonl", *loggers)):
            with starting(name):  # a tracker's failure: one line naming it
                writers.append(make[name]())
    except BaseException:
        for w in writers:
            w.close()
        raise
    return writers
