"""What the benchmark scripts share: the machine description, medians over runs,
number formatting and the report files (JSON plus Markdown, under ``results/``)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
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
            jax=jax.__version__, ray=ray.__version__, jax_backend=jax.default_backend(),
            device_kind=device.device_kind, num_devices=jax.device_count(),
        )
    return info


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
    """Median over the runs that did not raise (they have no measurements)."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def write_report(out_dir: str, name: str, report: dict[str, Any], text: str) -> None:
    """Writes ``<name>.json`` and ``<name>.md`` under ``out_dir`` and prints the Markdown."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, allow_nan=False)
    with open(os.path.join(out_dir, f"{name}.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
