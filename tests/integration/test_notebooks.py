"""The notebooks are stored with the outputs of their cells as they stand (written by
``benchmarks/notebook_outputs.py``, ``make notebooks``), and run from top to bottom in a Jupyter
kernel, each with a small env-step budget (their ``parameters`` cell replaced), without an error
or a known-noise warning, each showing a plot, their code cells giving outputs of the kinds
stored."""

from __future__ import annotations

import importlib.util
import os

import nbformat
import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
BUDGETS = {"quickstart": 6_000, "custom_plan": 3_000, "compare_runs": 10_000}
"""Env steps per run: enough for every cell to run (a few iterations), not to learn."""
NOISE = (
    "os.fork() was called",
    "IProgress not found",
    "Missing packages",
    "Token authentication is enabled",
    "Traceback",
)


def _stored_outputs():
    """``benchmarks/notebook_outputs.py`` as a module: how outputs are stored and compared."""
    spec = importlib.util.spec_from_file_location(
        "benchmarks_notebook_outputs", os.path.join(BENCHMARKS, "notebook_outputs.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stored_outputs = _stored_outputs()


def _stored(name: str) -> nbformat.NotebookNode:
    return nbformat.read(stored_outputs.path_of(name), as_version=4)


def test_every_notebook_is_run_here():
    notebooks = sorted(f.removesuffix(".ipynb") for f in os.listdir(stored_outputs.NOTEBOOKS) if f.endswith(".ipynb"))
    assert notebooks == sorted(BUDGETS) == sorted(stored_outputs.BUDGETS)


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_a_notebook_is_stored_with_the_outputs_of_its_cells(name):
    nb = _stored(name)
    stale = stored_outputs.stale_cells(nb)
    if stale:
        pytest.fail(
            f"notebooks/{name}.ipynb: cell(s) at index {stale} changed since their outputs were stored: {stored_outputs.RERUN_HINT}",
            pytrace=False,
        )
    # the parameters cell (its hash checked above) states the budget the outputs were made with
    assert stored_outputs.budget(nb) == stored_outputs.BUDGETS[name]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    kinds = [k for cell in stored_outputs.output_kinds(nb).values() for k in cell]
    assert kinds.count("execute_result image/png") + kinds.count("display_data image/png") == 1
    assert "error" not in kinds
    stderr = "".join(o.text for c in code for o in c.outputs if o.output_type == "stream" and o.name == "stderr")
    assert [n for n in NOISE if n in stderr] == [], stderr
    assert "widgets" not in nb.metadata


def test_a_changed_cell_is_told_apart_from_its_stored_outputs():
    nb = _stored("quickstart")
    before = set(stored_outputs.stale_cells(nb))  # none, unless the test above fails
    stored_outputs.set_budget(nb, BUDGETS["quickstart"])
    (index,) = set(stored_outputs.stale_cells(nb)) - before
    assert nb.cells[index] is stored_outputs.parameters_cell(nb)
    assert nb.cells[index].source.startswith(f"STEPS = {BUDGETS['quickstart']:_}  #")  # the comment kept


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_a_notebook_runs_and_shows_a_plot(name, tmp_path):
    nb = _stored(name)
    stored_kinds = stored_outputs.output_kinds(nb)
    stored_outputs.set_budget(nb, BUDGETS[name])
    stored_outputs.execute(nb, str(tmp_path))  # raises CellExecutionError, naming the cell, on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    stderr = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stderr")
    assert [n for n in NOISE if n in stderr] == [], stderr
    assert (tmp_path / "runs").is_dir()  # the runs went to the notebook's folder
    fresh_kinds = stored_outputs.output_kinds(nb)
    differ = [i for i in stored_kinds if stored_kinds[i] != fresh_kinds[i]]
    if differ:
        pytest.fail(
            f"notebooks/{name}.ipynb: cell(s) at index {differ} now give outputs of other kinds than stored "
            f"({[fresh_kinds[i] for i in differ]}, stored {[stored_kinds[i] for i in differ]}; streams now: "
            f"{[o.get('text', '') for i in differ for o in nb.cells[i].outputs if o.output_type == 'stream']}): "
            f"{stored_outputs.RERUN_HINT}",
            pytrace=False,
        )
