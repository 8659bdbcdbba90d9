"""Names of a package that load on first use (PEP 562), shared by ``jaxflow`` and ``jaxflow.api``.

A package lists, per module, the names it re-exports; ``lazy_exports`` gives it the module-level
``__getattr__`` and ``__dir__`` that import a name's module only when the name is first asked for,
so that importing the package starts no JAX, Ray or algorithm import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any


def lazy_exports(
    package: str, names_by_module: Mapping[str, str], namespace: dict[str, Any], submodules: Collection[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``namespace`` is its ``globals()``.

    ``names_by_module`` maps a module to its re-exported names, separated by spaces;
    ``submodules`` are the package's own modules that ``package.<name>`` imports on first use.

    >>> namespace = {}
    >>> getattr_, dir_ = lazy_exports("pkg", {"math": "pi tau"}, namespace)
    >>> round(getattr_("pi"), 2), "pi" in namespace, dir_()
    (3.14, True, ['pi', 'tau'])
    """
    exports = {name: module for module, names in names_by_module.items() for name in names.split()}
    exports.update({name: f"{package}.{name}" for name in submodules})

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if name in submodules else getattr(imported, name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
