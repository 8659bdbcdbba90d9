"""The tuned examples (``examples/tuned/*.json``) as the tests run them: read by the command
line's own parsing (``jaxflow train --config FILE``), so that the numbers in the files stay true."""

from __future__ import annotations

import json
import os
from typing import Any

from jaxflow import Algorithm
from jaxflow.api.cli_args import new_run, parse
from jaxflow.api.loop import parse_stop, train

TUNED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "tuned")


def path(name: str) -> str:
    """``examples/tuned/<name>.json``."""
    return os.path.join(TUNED, f"{name}.json")


def names() -> list[str]:
    """Every tuned example, by name."""
    return sorted(f.removesuffix(".json") for f in os.listdir(TUNED) if f.endswith(".json"))


def build(name: str, *flags: str) -> tuple[Algorithm, dict[str, float]]:
    """The example's algorithm (not started) and stop conditions, as ``jaxflow train --config``
    builds them; ``flags`` are further command-line flags, which override the file's."""
    args = parse(["train", "--config", path(name), *flags])
    spec, config = new_run(args)
    return Algorithm(config, spec), parse_stop(args.stop)


def reaches(name: str) -> dict[str, Any]:
    """What the example states it reaches (its ``reaches`` object)."""
    with open(path(name), encoding="utf-8") as f:
        return json.load(f).get("reaches", {})


def assert_reaches(name: str, result: dict[str, Any]) -> None:
    """Each of the example's stated results is met by ``result`` (a key ``a/b`` is ``result[a][b]``)."""
    for key, target in reaches(name).items():
        value: Any = result
        for part in key.split("/"):
            value = value.get(part, {}) if isinstance(value, dict) else {}
        assert isinstance(value, (int, float)) and value >= target, (name, key, value, result)


def run(name: str, *flags: str) -> tuple[dict[str, Any], Algorithm, dict[str, float]]:
    """Trains the example to its stop conditions and checks what it states it reaches:
    ``(the last result, the stopped algorithm, the stop conditions)``."""
    algo, stop = build(name, *flags)
    try:
        result = train(algo, stop, verbose=False)
    finally:
        algo.stop()
    assert_reaches(name, result)
    return result, algo, stop
