"""Which checkpoints a run keeps: the newest ``keep`` and the best one, the rest deleted.

A checkpoint's score is the return the run reported at its iteration (progress.jsonl's row):
``evaluation/episode_return_mean`` where the run evaluates, else ``episode_return_mean``.
``best_checkpoint.json`` in the run directory names the best one and its score.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

from jaxflow.api.plot import PROGRESS_FILE
from jaxflow.config.fields import ConfigError

BEST_FILE = "best_checkpoint.json"
DEFAULT_KEEP = 3
_NAME = re.compile(r"^checkpoint_(\d+)$")


def score(row: Mapping[str, Any]) -> float | None:
    """The return a result row reports: its evaluation's where there is one, else training's."""
    evaluation = row.get("evaluation")
    value = evaluation.get("episode_return_mean") if isinstance(evaluation, Mapping) else None
    value = row.get("episode_return_mean") if value is None else value
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def scores_by_iteration(logdir: str) -> dict[int, float]:
    """Each logged iteration's :func:`score` (the last row of an iteration wins, as after a
    resume); iterations without one (no finished episode yet) are left out."""
    path = os.path.join(logdir, PROGRESS_FILE)
    out: dict[int, float] = {}
    if not os.path.isfile(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
                iteration = int(row["training_iteration"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash: the rows before it still count
            value = score(row)
            if value is None:
                out.pop(iteration, None)
            else:
                out[iteration] = value
    return out


def prune_checkpoints(logdir: str, keep: int = DEFAULT_KEEP) -> list[str]:
    """Deletes all checkpoints in ``logdir`` but the newest ``keep`` (0: keeps all) and the
    best-scoring one, which :data:`BEST_FILE` names; returns the deleted paths.

    Example:
        >>> prune_checkpoints("runs/ppo", keep=3)  # doctest: +SKIP
        ['runs/ppo/checkpoint_000010', 'runs/ppo/checkpoint_000020']
    """
    found = sorted(((int(m.group(1)), name) for name in os.listdir(logdir) if (m := _NAME.match(name))), reverse=True)
    scores = scores_by_iteration(logdir)
    scored = [(scores[i], i, name) for i, name in found if i in scores]
    best = max(scored)[2] if scored else None
    if best is not None:
        _write_best(logdir, best, max(scored)[0])
    if keep <= 0:
        return []
    kept = {name for _, name in found[:keep]} | {best}
    deleted = [os.path.join(logdir, name) for _, name in found if name not in kept]
    for path in deleted:
        shutil.rmtree(path, ignore_errors=True)
    return deleted


def named_best(path: str) -> str | None:
    """The checkpoint ``path`` names through a :data:`BEST_FILE`: ``path`` is that file, or a
    folder holding one and no ``checkpoint_<N>`` of its own (a Tune experiment's, whose trials
    hold the checkpoints); None for any other path. The file's ``checkpoint`` is read from its
    folder (a run's names a checkpoint beside it, Tune's a full path). Raises
    :class:`ConfigError` (one line) for a file jaxflow did not write.

    Example:
        >>> named_best("runs/tune-ppo")  # doctest: +SKIP
        '/home/me/runs/tune-ppo/PPO_f745c_00000_.../checkpoint_000001/checkpoint_000008'
    """
    if os.path.isfile(path) and os.path.basename(path) == BEST_FILE:
        best_file = path
    elif os.path.isdir(path) and os.path.isfile(os.path.join(path, BEST_FILE)):
        if any(_NAME.match(name) for name in os.listdir(path)):
            return None  # a run's folder: its own newest checkpoint, as before
        best_file = os.path.join(path, BEST_FILE)
    else:
        return None
    try:
        with open(best_file, encoding="utf-8") as f:
            named = json.load(f)["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{best_file}: not a {BEST_FILE} that jaxflow wrote ({type(e).__name__}: {e}).") from None
    if not isinstance(named, str) or not named:
        raise ConfigError(f"{best_file}: its 'checkpoint' must name a checkpoint, got {named!r}.")
    return os.path.join(os.path.dirname(os.path.abspath(best_file)), named)


def _write_best(logdir: str, name: str, value: float) -> None:
    tmp = os.path.join(logdir, f".{BEST_FILE}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"checkpoint": name, "score": value}, f)
    os.replace(tmp, os.path.join(logdir, BEST_FILE))
