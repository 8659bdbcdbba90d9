"""The tested dependency versions (constraints.txt) cover every requirement pyproject.toml
names, and the installed versions are the pinned ones, so `make` installs what CI tested."""

from __future__ import annotations

import os
from importlib.metadata import version

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pins() -> dict[str, str]:
    out = {}
    for line in open(os.path.join(ROOT, "constraints.txt"), encoding="utf-8"):
        if line.strip() and not line.startswith("#"):
            name, _, pinned = line.strip().partition("==")
            out[canonicalize_name(name)] = pinned
    return out


def test_every_requirement_is_pinned_within_its_range():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pinned = pins()
    assert [r.name for r in requirements if canonicalize_name(r.name) not in pinned] == []
    assert [str(r) for r in requirements if pinned[canonicalize_name(r.name)] not in r.specifier] == []


def test_the_installed_core_versions_are_the_pinned_ones():
    pinned = pins()
    for name in ("jax", "jaxlib", "flax", "optax", "ray", "gymnasium", "gymnax", "orbax-checkpoint"):
        assert version(name) == pinned[name], name
