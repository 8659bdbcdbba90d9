"""Where results go: progress.jsonl, TensorBoard, the console."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxflow.api.stops import STOPPED_BY
from jaxflow.config.constants import ENV_STEPS_SAMPLED


def _scalars(result: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flattens nested numeric results to ``{"learner/loss": 0.1, ...}``."""
    out: dict[str, float] = {}
    for k, v in result.items():
        if isinstance(v, Mapping):
            out.update(_scalars(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
            out[prefix + k] = float(v)
    return out


class JsonLinesWriter:
    """Appends one JSON object per iteration to ``progress.jsonl`` (NaN written as null)."""

    def __init__(self, logdir: str):
        os.makedirs(logdir, exist_ok=True)
        self._f = open(os.path.join(logdir, "progress.jsonl"), "a", encoding="utf-8")

    def write(self, result: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(_json_safe(result)) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _json_safe(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if not math.isfinite(float(x)) else float(x)
    return x


def tensorboard_step(counters: Mapping[str, Any]) -> int:
    """TensorBoard's step for a result (or a run's counters): its env steps sampled, else its iteration."""
    return int(counters.get(ENV_STEPS_SAMPLED, counters.get("training_iteration", 0)))


class TensorBoardWriter:
    """Writes every numeric result as a TensorBoard scalar, stepped by :func:`tensorboard_step`.

    ``purge_step``: a run resumed from a checkpoint writes again from this step on, so
    TensorBoard discards the events an earlier writer left at this step and after
    (its ``SessionLog.START`` event), and each step keeps one value.

    The file name ends in the creation time in nanoseconds: tensorboardX names files by the
    second, so a writer opened within the second of the last one (a quick resume) would erase
    its file; TensorBoard reads a directory's files in name order, which this keeps.
    """

    def __init__(self, logdir: str, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        self._w = SummaryWriter(logdir, purge_step=purge_step, filename_suffix=f".{time.time_ns()}")

    def write(self, result: Mapping[str, Any]) -> None:
        scalars = [(_scalars({k: v for k, v in result.items() if k != "evaluation"}), tensorboard_step(result))]
        # Each evaluation during training at the step of the policy it played, however late it reports.
        scalars += [(_scalars(e, "evaluation/"), tensorboard_step(e)) for e in result.get("evaluations", ())]
        for values, step in scalars:
            for k, v in values.items():
                if math.isfinite(v):
                    self._w.add_scalar(k, v, step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()


def progress_display() -> str:
    """Where progress goes: ``"notebook"`` (a Jupyter kernel with ipywidgets: tqdm's widget),
    ``"terminal"`` (stderr is a terminal: tqdm's bar) or ``"lines"`` (one line per iteration:
    logs, pipes, and notebooks without ipywidgets, where tqdm's widget would only warn)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if type(shell).__name__ == "ZMQInteractiveShell":  # a Jupyter kernel (not the IPython terminal)
        try:
            import ipywidgets  # noqa: F401 - tqdm's widget needs it
        except ImportError:
            return "lines"
        return "notebook"
    return "terminal" if sys.stderr.isatty() else "lines"


class ConsoleProgress:
    """A progress bar (tqdm's on a terminal, its widget in a notebook), one plain line per
    iteration otherwise."""

    def __init__(self, stop: Mapping[str, float]):
        display = progress_display()
        if display == "notebook":
            from tqdm.notebook import tqdm
        else:
            from tqdm import tqdm

        self._key = next((k for k in ("env_steps_sampled", "training_iteration", "time_s") if k in stop), None)
        self._tty = display != "lines"
        total = stop.get(self._key) if self._key else None
        self._bar = tqdm(
            total=total, unit=" steps" if self._key == "env_steps_sampled" else " it", disable=not self._tty
        )
        self._last = 0.0
        self._evaluated = ""  # the newest evaluation, kept on the bar until a newer one reports

    def write(self, result: Mapping[str, Any]) -> None:
        ret = result.get("episode_return_mean", float("nan"))
        line = (
            f"iter {result['training_iteration']:>4d}  steps {result[ENV_STEPS_SAMPLED]:>9,d}  "
            f"return {ret:7.1f}  {result.get('env_steps_per_s', 0):>8,.0f} steps/s  {result['time_s']:6.1f}s"
        )
        evaluated = [_evaluated(e) for e in result.get("evaluations", ())]
        stopped = [f"stopped by {result[STOPPED_BY]}"] if result.get(STOPPED_BY) else []  # a callback's stop
        if not self._tty:
            print("  ".join([line, *evaluated, *stopped]), flush=True)
            return
        for said in stopped:
            self._bar.write(said)
        self._evaluated = evaluated[-1] if evaluated else self._evaluated
        if self._key:
            now = float(result[self._key])
            self._bar.update(now - self._last)
            self._last = now
        shown = f", {self._evaluated}" if self._evaluated else ""
        self._bar.set_postfix_str(f"return {ret:.1f}, {result.get('env_steps_per_s', 0):,.0f} steps/s{shown}")

    def close(self) -> None:
        self._bar.close()


def _evaluated(evaluation: Mapping[str, Any]) -> str:
    """An evaluation during training on the console: its mean return and the iteration whose policy played."""
    return f"eval {evaluation['episode_return_mean']:.1f} (iter {evaluation['training_iteration']})"
