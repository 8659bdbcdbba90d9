"""Learning curves from run directories: ``jaxflow plot RUN... --metric M --x X --out F``.

Each run is one line: its ``progress.jsonl`` rows, one per training iteration (a resumed
run's later rows win, so an iteration counts once). A run of several agents at once
(device mode's ``--num-seeds`` / ``--sweep``) draws the mean over its members as the line
and the band between the lowest and highest member around it.

The image is written whole or not at all, to a new path or, with ``overwrite``, over an
earlier plot of jaxflow's (marked in the image's metadata), never over any other file
(:mod:`jaxflow.api.outputs`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxflow.api.outputs import PLOT, PLOT_MARK, claim_output, written
from jaxflow.config.fields import ConfigError, did_you_mean

PROGRESS_FILE = "progress.jsonl"
X_KEYS = ("env_steps_sampled", "time_s", "training_iteration")
BAND_ALPHA = 0.25
DPI = 120


class Curve(NamedTuple):
    """One run's ``x``, the mean ``y`` over its members, and the lowest and highest member
    (all equal for a run of one agent)."""

    label: str
    x: np.ndarray
    y: np.ndarray
    low: np.ndarray
    high: np.ndarray


def read_progress(run: str) -> list[dict[str, Any]]:
    """The rows of ``run``'s progress file, the last one of each training iteration, in order."""
    path = os.path.join(run, PROGRESS_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"{run!r} is not a run directory: it has no {PROGRESS_FILE}.")
    rows: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                rows[int(row["training_iteration"])] = row
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"{path}, line {n}: not a result row (JSON with a training_iteration).") from None
    return [rows[i] for i in sorted(rows)]


def curve(run: str, metric: str, x: str = "env_steps_sampled", label: str | None = None) -> Curve:
    """The learning curve of ``metric`` over ``x`` in ``run`` (rows where it is not yet
    defined, e.g. before the first finished episode, are left out)."""
    if x not in X_KEYS:
        raise ConfigError(f"--x must be one of {list(X_KEYS)}, got {x!r}.")
    rows = read_progress(run)
    _check_metric(run, rows, metric)
    points = []
    for row in rows:
        values = _member_values(row, metric)
        if values.size and row.get(x) is not None:
            points.append((float(row[x]), values.mean(), values.min(), values.max()))
    xs, ys, lows, highs = (np.asarray(c, np.float64) for c in zip(*points)) if points else (np.zeros(0),) * 4
    return Curve(label or os.path.basename(os.path.normpath(run)), xs, ys, lows, highs)


def plot_runs(
    runs: Sequence[str],
    metric: str = "episode_return_mean",
    x: str = "env_steps_sampled",
    out: str | None = None,
    overwrite: bool = False,
) -> Any:
    """One line per run (and its members' band); saved to ``out`` (PNG, SVG, PDF: by its
    suffix) when given: a new file, or with ``overwrite`` an earlier plot (any other existing
    file is refused before the runs are read). Returns the matplotlib figure."""
    if out:
        claim_output(out, PLOT, overwrite)
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    curves = [curve(run, metric, x) for run in runs]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in curves:
        (line,) = ax.plot(c.x, c.y, label=c.label)
        if np.any(c.high > c.low):
            ax.fill_between(c.x, c.low, c.high, color=line.get_color(), alpha=BAND_ALPHA, linewidth=0)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if out:
        with written(out, PLOT, overwrite) as tmp:  # the format by the suffix: the temporary name has another
            fig.savefig(tmp, dpi=DPI, format=os.path.splitext(out)[1][1:].lower(), metadata={"Creator": PLOT_MARK})
    return fig


def _member_values(row: Mapping[str, Any], metric: str) -> np.ndarray:
    """``metric`` of each member of a several-agent row, else the row's own value; undefined values left out."""
    members = row.get("members")
    found = [m.get(metric) for m in members.values()] if members else [row.get(metric)]
    return np.asarray([v for v in found if isinstance(v, (int, float))], np.float64)


def _check_metric(run: str, rows: Sequence[Mapping[str, Any]], metric: str) -> None:
    known = sorted({k for row in rows for k, v in row.items() if isinstance(v, (int, float)) or v is None})
    if rows and metric not in known:
        hint = did_you_mean(metric, known)
        raise ConfigError(f"{run!r} has no metric {metric!r}.{hint} Its metrics: {', '.join(known)}.")
