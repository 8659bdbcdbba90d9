"""The import direction of the three packages: jaxflow.envs -> the engine -> jaxflow.algorithms.

The engine never imports an algorithm (it finds them through entry points), jaxflow.envs
imports nothing of the engine, and no top-level ``envs`` or ``algorithms`` module is
installed to collide with other distributions.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE_PARTS = ("api", "config", "dataflow", "learn", "networks", "ondevice", "ops", "replay", "rollout", "tune")


def loaded_after(code: str) -> list[str]:
    """The jaxflow modules a fresh interpreter has loaded after running ``code``."""
    script = (
        code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'jaxflow')))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def imports_of(path: str) -> set[str]:
    """Every module an import statement in ``path`` names, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def python_files(folder: str) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".py")]


def test_importing_jaxflow_loads_nothing_until_a_name_is_used():
    # jaxflow._lazy is the small helper (importlib only) that gives packages their lazy names.
    assert loaded_after("import jaxflow") == ["jaxflow", "jaxflow._lazy"]


def test_the_whole_engine_loads_without_any_algorithm():
    code = "import importlib\n" + "\n".join(f"importlib.import_module('jaxflow.{p}')" for p in ENGINE_PARTS)
    code += "\nimport jaxflow\njaxflow.Algorithm, jaxflow.ParallelRollouts, jaxflow.DeviceProgram"
    loaded = loaded_after(code)
    assert any(m.startswith("jaxflow.rollout.") for m in loaded)  # the engine did load
    assert [m for m in loaded if m.startswith("jaxflow.algorithms")] == []


def test_no_engine_module_imports_an_algorithm():
    offenders = {
        os.path.relpath(path, REPO): sorted(m for m in imports_of(path) if m.startswith("jaxflow.algorithms"))
        for part in ENGINE_PARTS
        for path in python_files(os.path.join(REPO, "jaxflow", part))
    }
    assert {p: m for p, m in offenders.items() if m} == {}


def test_envs_imports_nothing_of_the_engine():
    offenders = {
        os.path.relpath(path, REPO): sorted(
            m
            for m in imports_of(path)
            if m.startswith("jaxflow") and not m.startswith("jaxflow.envs") and m != "jaxflow"
        )
        for path in python_files(os.path.join(REPO, "envs"))
    }
    assert {p: m for p, m in offenders.items() if m} == {}
    assert [m for m in loaded_after("import jaxflow.envs") if not m.startswith("jaxflow.envs")] == [
        "jaxflow",
        "jaxflow._lazy",
    ]


@pytest.mark.parametrize("name", ["envs", "algorithms"])
def test_no_top_level_envs_or_algorithms_is_installed(name, tmp_path):
    # From outside the checkout (a user's own folder), only the jaxflow namespace exists.
    code = f"import importlib.util; print(importlib.util.find_spec({name!r}) is None, importlib.util.find_spec('jaxflow.{name}') is not None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.split() == ["True", "True"]


def test_algorithms_are_found_through_entry_points():
    code = "from jaxflow.api.registry import get_algorithm, list_algorithms\nlist_algorithms(); get_algorithm('ppo')"
    loaded = loaded_after(code)
    assert "jaxflow.algorithms.ppo" in loaded and "jaxflow.algorithms.dqn" in loaded
