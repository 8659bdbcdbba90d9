"""``docs/results.md`` is generated from the rows' JSON, which agree with their tuned files and
with the runs they record (``benchmarks/results_page.py``, ``benchmarks/reproduce.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")


def _module(name: str):
    """A benchmark script as a module. It imports its neighbours by name, as when run, so the
    folder is on the path while it loads, and neither the folder nor those neighbours stay
    (``benchmarks/tuned_examples.py`` would shadow ``tests/tuned_examples.py``)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.path.insert(0, BENCHMARKS)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
        for added in set(sys.modules) - before:
            if (getattr(sys.modules[added], "__file__", None) or "").startswith(BENCHMARKS):
                del sys.modules[added]
    return module


page_mod = _module("results_page")
reproduce = _module("reproduce")
RECORDS = page_mod.load_records()


def test_the_page_is_what_the_rows_json_generate():
    with open(page_mod.PAGE, encoding="utf-8") as f:
        assert f.read() == page_mod.page(RECORDS)
    for family in page_mod.families(RECORDS):
        assert os.path.exists(os.path.join(page_mod.RESULTS_DIR, f"{page_mod.slug(family)}.png"))


def test_every_row_of_a_tuned_file_has_been_run_and_agrees_with_it():
    recorded = {r["row"]: r for r in RECORDS}
    declared = page_mod.rows_with_reference()
    assert sorted(recorded) == sorted(declared)
    for row, record in recorded.items():
        with open(os.path.join(page_mod.TUNED_DIR, f"{row}.json"), encoding="utf-8") as f:
            spec = json.load(f)
        # a changed reference needs its row re-run; its note (commentary, read from the file) does not
        assert without_note(record["reference"]) == without_note(spec["reference"]), row
        assert (record["algo"], record["env"]) == (spec["algo"], spec["env"])
        assert record["budget_env_steps"] == spec["stop"]["env_steps_sampled"]
        assert len(record["runs"]) >= 3 and all(r["env_steps"] >= record["budget_env_steps"] for r in record["runs"])


def without_note(reference: dict) -> dict:
    return {k: v for k, v in reference.items() if k != "note"}


@pytest.mark.parametrize("record", RECORDS, ids=[r["row"] for r in RECORDS])
def test_a_rows_figures_are_its_runs_figures(record):
    scores = [r["score"] for r in record["runs"]]
    assert record["seeds"] == [r["seed"] for r in record["runs"]] and len(set(record["seeds"])) == len(scores)
    assert math.isclose(record["mean"], statistics.fmean(scores))
    assert math.isclose(record["std"], statistics.pstdev(scores), abs_tol=1e-9)
    assert math.isclose(record["median"], statistics.median(scores))
    for run in record["runs"]:
        assert run["curve"][-1][0] == run["env_steps"]  # the curve runs to the end of its run
        if record["reference"]["metric"] == "training":
            assert run["score"] == run["final_training_return"] == run["curve"][-1][1]


def _record(mean: float, ref: float, std: float | None) -> dict:
    run = {"seed": 0, "score": mean, "wall_s": 10.0, "env_steps_per_s": 100.0, "seeds_in_process": 1}
    return {
        "row": "r",
        "algo": "PPO",
        "env": "E-v0",
        "budget_env_steps": 1000,
        "reference": {"score": ref, "std": std},
        "runs": [run] * 3,
        "mean": mean,
        "std": 0.0,
        "median": mean,
        "parallel_processes": 2,
    }


def test_a_row_meets_its_reference_from_its_mean_less_one_reference_std():
    cells = [c.strip() for c in page_mod.row_line(_record(900.0, 1000.0, 100.0), 1).split("|")]
    assert cells[6:10] == ["1,000.00 ± 100.00 [1]", "0.90", "✓", "10 s (2 at a time)"]
    assert page_mod.row_line(_record(899.0, 1000.0, 100.0), 1).split("|")[8].strip() == "✗"
    assert page_mod.row_line(_record(-131.0, -130.0, None), 1).split("|")[8].strip() == "✗"
    assert page_mod.row_line(_record(-129.0, -130.0, None), 1).split("|")[8].strip() == "✓"
    assert [page_mod.verdict(-131.0, s, -130.0) for s in (0.5, 1.0, 2.0)] == ["✗", "≈", "≈"]


def test_a_reference_lacking_a_field_is_refused_naming_it():
    spec = {"stop": {"env_steps_sampled": 1}, "reference": {"family": "f", "seeds": [0], "metric": "training"}}
    with pytest.raises(SystemExit, match=r"lacks \['score', 'source', 'std'\]"):
        page_mod.reference_of("x", spec)
    spec["reference"].update(score=1.0, std=None, source="s", metric="best")
    with pytest.raises(SystemExit, match="reference.metric is one of"):
        page_mod.reference_of("x", spec)


def test_curves_keep_the_last_iteration_and_skip_iterations_before_any_episode():
    progress = [
        {"env_steps_sampled": 10 * i, "episode_return_mean": float("nan") if i < 2 else i} for i in range(1, 451)
    ]
    points = reproduce.curve(progress, None)
    assert points[-1] == [4500, 450.0] and len(points) <= reproduce.CURVE_POINTS + 1
    assert all(not math.isnan(p[1]) for p in points) and points[0][1] >= 2
    members = {"members": {"seed=3": {"episode_return_mean": 7.0}}, "env_steps_sampled": 5}
    assert reproduce.member_keys([members]) == ["seed=3"] and reproduce.curve([members], "seed=3") == [[5, 7.0]]
