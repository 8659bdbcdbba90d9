"""What the benchmark scripts share: the machine description, medians over runs,
number formatting and the report files (JSON plus Markdown, under ``results/``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def machine_info(runtime: bool = True) -> dict[str, Any]:
    """CPU, load and versions; with ``runtime``, also jax, ray and the learner's device."""
    cpu_model = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu_model)
    info = {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "load_average_at_start": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    if runtime:
        import jax
        import ray

        device = jax.devices()[0]
        info.update(
            jax=jax.__version__,
            ray=ray.__version__,
            jax_backend=jax.default_backend(),
            device_kind=device.device_kind,
            num_devices=jax.device_count(),
        )
    return info


def cpu_clock(actors: Sequence[Any]) -> Callable[[], float]:
    """CPU seconds so far (user and system, every thread) of this process and of the given Ray
    actors' processes."""
    import psutil
    import ray

    procs = [psutil.Process()] + [psutil.Process(p) for p in ray.get([a.__ray_call__.remote(_pid) for a in actors])]

    def clock() -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in procs))

    return clock


def _pid(_actor: Any) -> int:
    return os.getpid()


def logger(prefix: str) -> Callable[[str], None]:
    """Progress lines on stderr, so stdout carries only the report."""
    return lambda message: print(f"[{prefix}] {message}", file=sys.stderr, flush=True)


def fmt(x: float | None, spec: str, none: str = "—") -> str:
    return none if x is None else format(x, spec)


def median_of_reached(values: Sequence[float | None]) -> float | None:
    """Median counting a missed target (None) as slower than any hit, so it is None only
    when at most half the runs reached the target."""
    if not values:
        return None
    m = statistics.median(sorted(math.inf if v is None else v for v in values))
    return None if math.isinf(m) else m


def median_of_measured(values: Sequence[float | None]) -> float | None:
    """Median of the values that were measured; None marks one that was not (a run that raised,
    a field a run does not have), and the median of none is None."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def parse_sets(parser: Any, config_cls: type, items: Sequence[str], flags: dict[str, str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` items as typed config overrides, checked before anything starts:
    a malformed item, an unknown field or a bad value ends the script with ``parser.error``,
    and so does a field in ``flags`` (field -> the script's own flag that sets it)."""
    from jaxflow.config import ConfigError, parse_value

    overrides = {}
    for item in items:
        field, sep, text = item.partition("=")
        field = field.strip()
        if not sep:
            parser.error(f"--set takes FIELD=VALUE, got {item!r}")
        if field in flags:
            parser.error(f"--set {field}: set by {flags[field]} in this script")
        try:
            overrides[field] = parse_value(config_cls, field, text.strip())
        except ConfigError as error:
            parser.error(str(error))
    return overrides


def parse_variants(
    parser: Any, config_cls: type, items: Sequence[str], flags: dict[str, str], base: dict[str, Any]
) -> list[dict[str, Any]]:
    """``--variant "FIELD=VALUE ..."`` items as override dicts, after the base config's
    ``{}``: the configs a script measures in turn in one run. Each item is parsed as ``--set``
    is, and the config it makes of ``base`` (the script's whole base config) is built, so a
    bad combination also ends the script with ``parser.error`` before anything starts."""
    from jaxflow.config import ConfigError, make_config

    variants = [parse_sets(parser, config_cls, item.split(), flags) for item in items]
    if any(not v for v in variants):
        parser.error("--variant takes one or more FIELD=VALUE items")
    variants = [{}] + variants
    for variant in variants:
        try:
            make_config(config_cls, **{**base, **variant})
        except ConfigError as error:
            parser.error(f"{variant_name(variant)}: {error}")
    return variants


def without(config: dict[str, Any], *names: str) -> dict[str, Any]:
    """A config's JSON dict (see ``to_json_dict``) less the fields ``names``: top-level or
    dotted (``"rollout.num_workers"``), for reports that state what varies per run separately."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for name in names:
        group, _, leaf = name.rpartition(".")
        (out[group] if group else out).pop(leaf)
    return out


def variant_name(variant: dict[str, Any]) -> str:
    """``"FIELD=VALUE ..."``, or ``"base"`` for the base config."""
    return " ".join(f"{k}={v}" for k, v in variant.items()) or "base"


def write_report(out_dir: str, name: str, report: dict[str, Any], text: str) -> None:
    """Writes ``<name>.json`` and ``<name>.md`` under ``out_dir`` and prints the Markdown."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, allow_nan=False)
    with open(os.path.join(out_dir, f"{name}.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


@dataclasses.dataclass
class TargetRun:
    """One training run to a target return, timed: see :func:`run_to_target`."""

    build_s: float
    loop_s: float
    result: dict[str, Any]
    """The last iteration's result."""
    first_iteration: tuple[float, int]
    """Seconds into the loop and env steps sampled when the first iteration ended."""
    hit: tuple[float, int] | None
    """Seconds into the loop and env steps sampled when the target was first reached."""

    @property
    def env_steps(self) -> int:
        return int(self.result["env_steps_sampled"])

    @property
    def final_return_mean(self) -> float | None:
        value = float(self.result["episode_return_mean"])
        return None if math.isnan(value) else value


def run_to_target(build: Callable[[], Any], target: float, max_steps: int) -> TargetRun:
    """Builds an Algorithm and trains it until ``episode_return_mean >= target`` or
    ``max_steps`` env steps are sampled; always stops it."""
    t0 = time.perf_counter()
    algo = build()
    try:
        t1 = time.perf_counter()
        result: dict[str, Any] = {}
        first: tuple[float, int] | None = None
        hit: tuple[float, int] | None = None
        while hit is None and result.get("env_steps_sampled", 0) < max_steps:
            result = algo.train()
            now, steps = time.perf_counter() - t1, int(result["env_steps_sampled"])
            first = first or (now, steps)
            # episode_return_mean is NaN until an episode ends; NaN >= target is False.
            if result["episode_return_mean"] >= target:
                hit = (now, steps)
        t2 = time.perf_counter()
    finally:
        algo.stop()
    return TargetRun(t1 - t0, t2 - t1, result, first or (0.0, 0), hit)


def argument_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring's first paragraph as the description, defaults shown."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )


def save_figure(fig: Any, path: str) -> None:
    """Lays out ``fig``, writes it to ``path`` (120 dpi) and closes it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def own_venv(venv: str, batches: Sequence[Sequence[str]], log: Callable[[str], None]) -> str:
    """The Python of a peer library's virtual environment at ``venv``, made (``--clear``) when
    it is missing or lacks one of the ``name==version`` pins in ``batches``; each batch is one
    ``pip install``, in order (a first batch can keep pip from choosing a heavier build of a
    dependency, e.g. torch's CPU build before a package that asks for torch)."""
    import subprocess

    python = os.path.join(venv, "bin", "python")
    pins = [p for batch in batches for p in batch if "==" in p]
    probe = "import importlib.metadata as m, sys; sys.exit(any(m.version(n) != v for n, v in %r))" % [
        tuple(p.split("==")) for p in pins
    ]

    def pinned() -> bool:
        return os.path.exists(python) and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0

    if not pinned():
        log(f"making a virtual environment in {venv}: {', '.join(p for batch in batches for p in batch)}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        for batch in batches:
            subprocess.run([python, "-m", "pip", "install", "-q", *batch], check=True)
        if not pinned():
            raise RuntimeError(f"the virtual environment in {venv} does not have {pins}")
    return python
