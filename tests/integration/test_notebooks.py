"""The notebooks run from top to bottom in a Jupyter kernel, each with a small env-step budget
(their ``parameters`` cell replaced), without an error or a known-noise warning, each showing a
plot."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "notebooks")
BUDGETS = {"quickstart": 6_000, "custom_plan": 3_000, "compare_runs": 10_000}
"""Env steps per run: enough for every cell to run (a few iterations), not to learn."""
NOISE = ("os.fork() was called", "IProgress not found", "Traceback")
KERNEL_TIMEOUT_S = 600


def test_every_notebook_is_run_here():
    assert sorted(f.removesuffix(".ipynb") for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb")) == sorted(BUDGETS)


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_a_notebook_runs_and_shows_a_plot(name, tmp_path):
    nb = nbformat.read(os.path.join(NOTEBOOKS, f"{name}.ipynb"), as_version=4)
    (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert parameters.source.startswith("STEPS = ")
    parameters.source = f"STEPS = {BUDGETS[name]}"
    client = NotebookClient(
        nb, timeout=KERNEL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    stderr = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stderr")
    assert [n for n in NOISE if n in stderr] == [], stderr
    assert (tmp_path / "runs").is_dir()  # the runs went to the notebook's folder
