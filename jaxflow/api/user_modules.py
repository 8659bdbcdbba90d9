"""The user's own modules (``--import``): imported before anything is built, remembered by the
run (``imports`` in every checkpoint's ``meta.json`` and in ``config.json``), and imported again
wherever a checkpoint is restored, evaluated, exported or resumed, so that the environments and
models they register are found there without ``--import``. Giving ``--import`` again imports
nothing twice: Python runs a module once per process.

A remembered module that cannot be imported is no error by itself; where the checkpoint's config
then names an env or a model that nothing registered, :func:`missing_name` says which, and which
remembered module could not be imported, in one line (a :class:`MissingNameError`, never the
"does not verify" of a damaged checkpoint: the checkpoint is intact).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from jaxflow.config.fields import ConfigError

IMPORTS_KEY = "imports"
"""The key of the remembered modules in a checkpoint's ``meta.json`` and a run's ``config.json``."""

_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
"""A dotted module name: what ``--import`` takes and a checkpoint may remember."""

_IMPORTED: list[str] = []
"""The user's modules this process imported, in order: what its checkpoints remember."""


class MissingNameError(ConfigError):
    """A checkpoint's config names an env or a model that nothing in this process registered:
    the module that did was not imported (one line; a ``ConfigError``: exit status 2)."""


def import_modules(names: Sequence[str]) -> None:
    """``--import``: each module imported, from the current directory or the installed packages,
    pickled by value so that Ray workers on any node get what it defines (an environment's
    factory, a model) with the run, without the file, and remembered by the run's checkpoints."""
    for name in names:
        if _import(name) is None:
            raise ConfigError(
                f"--import {name}: no module named {name!r} in the current directory ({os.getcwd()}) "
                "or the installed packages."
            )


def imported_modules() -> list[str]:
    """The user's modules this process imported (:func:`import_modules`, or remembered by a
    checkpoint it restored), in order: what a checkpoint it writes remembers."""
    return list(_IMPORTED)


def module_roots(names: Sequence[str]) -> list[str]:
    """The folders this process imported the modules ``names`` from (each one's ``sys.path``
    entry: ``/a`` for ``pkg.mod`` in ``/a/pkg/mod.py``), for another process on this machine whose
    path lacks them (a Tune trial of a Ray that did not inherit ``PYTHONPATH``)."""
    roots: list[str] = []
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file:
            continue
        root = os.path.dirname(os.path.abspath(file))
        depth = name.count(".") + (os.path.basename(file) == "__init__.py")
        for _ in range(depth):
            root = os.path.dirname(root)
        if root not in roots:
            roots.append(root)
    return roots


def import_from(names: Sequence[str], roots: Sequence[str]) -> None:
    """:func:`import_modules` in another process: ``roots`` (:func:`module_roots`) added to the
    end of its path first, where they exist, so its own path keeps precedence."""
    sys.path.extend(r for r in roots if os.path.isdir(r) and r not in sys.path)
    import_modules(names)


def remembered(path: str, meta: Mapping[str, Any]) -> list[str]:
    """The modules checkpoint ``path``'s ``meta`` remembers ([] for a checkpoint of a run that
    imported none, or written before they were remembered); a value that is not a list of module
    names raises :class:`~jaxflow.api.checkpoint.CheckpointError`."""
    names = meta.get(IMPORTS_KEY, [])
    if not isinstance(names, list) or not all(isinstance(n, str) and _MODULE_NAME.match(n) for n in names):
        from jaxflow.api.checkpoint import fail

        raise fail(path, f"meta.json's {IMPORTS_KEY} is {names!r}, not a list of module names")
    return names


def import_remembered(names: Sequence[str]) -> dict[str, str]:
    """Imports each of ``names`` a checkpoint remembers (those already imported cost nothing);
    returns why each one that cannot be imported here could not (no such module on the path).
    A module that is found but fails to import raises its own error, as with ``--import``."""
    missing: dict[str, str] = {}
    for name in names:
        if _import(name) is None:
            missing[name] = f"no module named {name!r} in the current directory ({os.getcwd()}) or on sys.path"
    return missing


def is_missing_name(error: BaseException) -> bool:
    """Whether building a config failed on a name that nothing registered: an unknown env id or model."""
    from jaxflow.envs import UnknownEnvError
    from jaxflow.networks.models import UnknownModelError

    return isinstance(error, (UnknownEnvError, UnknownModelError))


def missing_name(path: str, config: Any, error: BaseException, missing: Mapping[str, str]) -> MissingNameError:
    """The one-line error for checkpoint ``path``, whose ``config`` names an env or a model
    (``error``, :func:`is_missing_name`) that is unknown here; ``missing``: the remembered
    modules that could not be imported (:func:`import_remembered`), which are named first."""
    from jaxflow.envs import UnknownEnvError

    what = f"env {config.env!r}" if isinstance(error, UnknownEnvError) else f"model {getattr(config, 'model', '')!r}"
    if missing:
        names = ", ".join(missing)
        return MissingNameError(
            f"checkpoint {path}: its {what} is unknown here: its run imported {names} (--import), which cannot "
            f"be imported here ({'; '.join(missing.values())}); put it on PYTHONPATH, run from its folder, or give --import."
        )
    said = " ".join(str(error).split())
    return MissingNameError(
        f"checkpoint {path}: its {what} is unknown here ({said}); import the module that registers it first "
        "(--import MODULE, or import it before Algorithm.restore)."
    )


def _import(name: str) -> ModuleType | None:
    """Module ``name``, imported (from the current directory too, as ``python -m`` does), shipped
    to Ray workers by value and remembered; None where no module of that name is found. A module
    that imports something missing raises its own error (its traceback is the user's to read)."""
    from jaxflow.dataflow.actors import ship_module_by_value

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is None or not (name == e.name or name.startswith(f"{e.name}.")):
            raise
        return None
    ship_module_by_value(module)
    if name not in _IMPORTED:
        _IMPORTED.append(name)
    return module
