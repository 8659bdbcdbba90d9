"""The notebooks in ``notebooks/`` stored with their outputs, so that a reader of the repository
sees their results and plots: each is executed in a Jupyter kernel in a temporary folder (its
runs never land in the repository), with the env-step budget of ``BUDGETS`` written into its
``parameters`` cell, and written back with its outputs.

    .venv/bin/python benchmarks/notebook_outputs.py                 # all of them; or: make notebooks
    .venv/bin/python benchmarks/notebook_outputs.py quickstart      # one

Each code cell's metadata records a hash of the source its outputs came from
(``jaxflow.source_sha256``); ``tests/integration/test_notebooks.py`` fails on a cell whose
source changed since, and checks that a fresh run (with a smaller budget) gives each code cell
outputs of the kinds stored.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
BUDGETS = {"quickstart": 300_000, "custom_plan": 200_000, "compare_runs": 300_000}
"""Env steps per run of the stored outputs: each curve rises (CartPole's return near 500) while a
notebook runs in about 3 minutes on 2 busy cores."""
PARAMETERS_TAG = "parameters"
BUDGET_LINE = re.compile(r"^STEPS = ([\d_]+)")
"""The parameters cell's first line; the rest of the line (its comment) is kept."""
METADATA_KEY = "jaxflow"
HASH_KEY = "source_sha256"
HASH_CHARS = 16
"""Enough of the SHA-256 to tell a changed cell, short enough not to clutter the file."""
KERNEL_TIMEOUT_S = 600
"""The longest one cell may run."""
PNG = "image/png"
RERUN_HINT = "run `make notebooks` (benchmarks/notebook_outputs.py) to store its outputs again"


def path_of(name: str) -> str:
    """Where notebook ``name`` is stored."""
    return os.path.join(NOTEBOOKS, f"{name}.ipynb")


def source_hash(source: str) -> str:
    """The hash a code cell's outputs are stored under."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:HASH_CHARS]


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The one code cell tagged ``parameters``, whose first line is ``STEPS = <budget>``."""
    (cell,) = [c for c in nb.cells if PARAMETERS_TAG in c.metadata.get("tags", [])]
    if not BUDGET_LINE.match(cell.source):
        raise ValueError(f"the parameters cell must start with 'STEPS = <int>', not {cell.source[:40]!r}")
    return cell


def budget(nb: nbformat.NotebookNode) -> int:
    """The env-step budget the notebook's parameters cell states."""
    match = BUDGET_LINE.match(parameters_cell(nb).source)
    assert match is not None  # parameters_cell checked it
    return int(match.group(1))


def set_budget(nb: nbformat.NotebookNode, steps: int) -> None:
    """Writes ``steps`` into the parameters cell (as ``300_000``), keeping the line's comment."""
    cell = parameters_cell(nb)
    cell.source = BUDGET_LINE.sub(f"STEPS = {steps:_}", cell.source, count=1)


def execute(nb: nbformat.NotebookNode, workdir: str) -> None:
    """Runs every cell in a fresh kernel started in ``workdir``; raises ``CellExecutionError``,
    naming the cell, on any error. Timings and widget state are not recorded (they change with
    every run); consecutive stream outputs are joined into one."""
    client = NotebookClient(
        nb,
        timeout=KERNEL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": workdir}},
        record_timing=False,
        store_widget_state=False,
        coalesce_streams=True,
    )
    client.execute()


def output_kind(output: dict[str, Any]) -> str:
    """``stream``, ``error``, or a rich output's type with ``image/png`` where it shows one."""
    kind = str(output["output_type"])
    if kind in ("display_data", "execute_result") and PNG in output.get("data", {}):
        return f"{kind} {PNG}"
    return kind


def output_kinds(nb: nbformat.NotebookNode) -> dict[int, list[str]]:
    """Per code cell (by its index among all cells), the kinds of its outputs, each once, in a
    fixed order: what a run with another budget must give too (how many stream chunks it prints,
    and on which stream, may differ)."""
    return {i: sorted({output_kind(o) for o in c.outputs}) for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def stale_cells(nb: nbformat.NotebookNode) -> list[int]:
    """The indices of the code cells whose source is not the one their outputs were stored from."""
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.metadata.get(METADATA_KEY, {}).get(HASH_KEY) != source_hash(c.source)
    ]


def _without(text: str, workdir: str) -> str:
    """``text`` with the kernel's folder (and what its links resolve to) made relative."""
    for path in {os.path.realpath(workdir), workdir}:
        text = text.replace(path + os.sep, "").replace(path, ".")
    return text


def tidy(nb: nbformat.NotebookNode, workdir: str) -> None:
    """Removes what changes from run to run for no reason (the temporary folder's path in text
    outputs, widget state, the kernel's Python version) and stamps each code cell with its
    source's hash."""
    for key in ("widgets", "language_info"):
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        cell.metadata[METADATA_KEY] = {HASH_KEY: source_hash(cell.source)}
        for output in cell.outputs:
            if "text" in output:
                output.text = _without(output.text, workdir)
            if "text/plain" in output.get("data", {}):
                output.data["text/plain"] = _without(output.data["text/plain"], workdir)


def store(name: str, steps: int) -> float:
    """Executes notebook ``name`` with ``steps`` and writes it back with its outputs; returns the
    seconds it ran."""
    nb = nbformat.read(path_of(name), as_version=4)
    set_budget(nb, steps)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"notebook-{name}-") as workdir:
        execute(nb, workdir)
        tidy(nb, workdir)
    seconds = time.monotonic() - start
    nbformat.write(nb, path_of(name))
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"notebooks to run (default: all of {sorted(BUDGETS)})"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BUDGETS))
    if unknown:
        print(f"notebook_outputs: unknown notebook {unknown[0]!r}: choose from {sorted(BUDGETS)}", file=sys.stderr)
        return 2
    # A new local Ray in each kernel, even where RAY_ADDRESS names a cluster: the stored outputs
    # are what a reader's own machine gives.
    os.environ["RAY_ADDRESS"] = "local"
    for name in args.names or sorted(BUDGETS):
        seconds = store(name, BUDGETS[name])
        size = os.path.getsize(path_of(name))
        print(f"notebooks/{name}.ipynb: STEPS = {BUDGETS[name]:_}, {seconds:.0f} s, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
