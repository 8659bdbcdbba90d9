"""Each setting of a config class with its group, default and docstring: what
``jaxflow list --algo NAME --fields`` prints.

A field's docstring is the string written under it in its class (an attribute docstring),
which Python keeps only in the source: it is read with :mod:`ast` from the source of each
class of the config's MRO, the most derived class that documents the field winning.

>>> from jaxflow.config import CommonConfig
>>> doc = next(d for d in field_docs(CommonConfig) if d.name == "gamma")
>>> doc.group, doc.default, doc.doc
('CommonConfig', 0.99, 'Discount factor.')
>>> next(d for d in field_docs(CommonConfig) if d.name == "num_workers").group
'rollout'
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
from typing import Any, NamedTuple

from jaxflow.config.names import groups

REQUIRED = "(required)"
"""What stands for the default of a field that has none."""


class FieldDoc(NamedTuple):
    """One setting of a config, by its flat name."""

    name: str
    group: str
    """The group field holding it (``rollout``), or the class that first declares it
    (``CommonConfig``, ``OffPolicyConfig``, the algorithm's own config class)."""
    default: Any
    """As the config declares it (a group's setting: in the config's default group), or :data:`REQUIRED`."""
    doc: str


def field_docs(cls: type) -> list[FieldDoc]:
    """Every setting of config class ``cls``, in the order of its fields, a group's settings in
    the group's place."""
    held, docs = groups(cls), attribute_docs(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = []
    for name, f in fields.items():
        if name not in held:
            out.append(FieldDoc(name, _declared_by(cls, name).__name__, declared_default(f), docs.get(name, "")))
            continue
        group, group_docs = declared_default(f), attribute_docs(held[name])
        for sub in dataclasses.fields(held[name]):
            default = REQUIRED if group is REQUIRED else getattr(group, sub.name)
            out.append(FieldDoc(sub.name, name, default, group_docs.get(sub.name, "")))
    return out


def group_doc(cls: type, group: str) -> str:
    """What ``group`` (a :attr:`FieldDoc.group`) of config class ``cls`` is: a group field's
    docstring, or the first paragraph of the declaring class's docstring."""
    held = groups(cls)
    if group in held:
        return attribute_docs(cls).get(group) or _first_paragraph(held[group])
    declaring = next((k for k in cls.__mro__ if k.__name__ == group), None)
    return _first_paragraph(declaring) if declaring is not None else ""


def declared_default(f: dataclasses.Field) -> Any:
    """The default ``f`` declares (its factory's value), or :data:`REQUIRED`."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED if f.default is dataclasses.MISSING else f.default


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings of ``cls``'s fields, by name (the most derived class's where several document one)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(_class_docs(klass))
    return docs


@functools.cache
def _class_docs(klass: type) -> dict[str, str]:
    """The attribute docstrings written in ``klass``'s own body (none where its source is not at hand)."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # a builtin, or a class made where no file holds it
        return {}
    body = next((node.body for node in ast.parse(source).body if isinstance(node, ast.ClassDef)), [])
    docs = {}
    for stmt, after in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _declared_by(cls: type, name: str) -> type:
    """The first class of ``cls``'s MRO, base first, that declares field ``name``."""
    return next(k for k in reversed(cls.__mro__) if name in inspect.get_annotations(k))


def _first_paragraph(klass: type) -> str:
    return (inspect.cleandoc(klass.__doc__ or "").split("\n\n") or [""])[0]
