"""MuJoCo's warnings about the model files gymnasium and brax ship, kept out of every run's output.

Gymnasium's and brax's ``half_cheetah.xml`` set the compiler attribute ``settotalmass``, which
MuJoCo deprecates (4.0 here): every compile of the model (each env copy of each rollout worker) printed
the same three lines on stderr and appended them to ``MUJOCO_LOG.TXT`` in the working folder. The
model is not the user's to change, so the warning says nothing they can act on.
:func:`quiet_model_deprecations` installs a MuJoCo warning handler that drops exactly those
deprecations and treats every other warning as MuJoCo does (stderr and ``MUJOCO_LOG.TXT``), so an
unstable simulation's warning still reaches the user.
"""

from __future__ import annotations

import re
import sys
from typing import Any

SHIPPED_MODEL_DEPRECATIONS = re.compile(r"compiler attribute 'settotalmass' is deprecated")
"""MuJoCo's warnings about attributes of the model files gymnasium and brax ship."""
MUJOCO_ENTRY_POINTS = "gymnasium.envs.mujoco"
"""Where gymnasium's MuJoCo environments live (entry points ``gymnasium.envs.mujoco.<env>:<Class>``)."""


def quiet_model_deprecations() -> None:
    """Installs the handler (see the module docstring) in this process, once; a warning handler
    already installed (the user's own) is left alone. Call before a MuJoCo model compiles."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warning)


def is_mujoco_env(env_id: str) -> bool:
    """Whether gymnasium's ``env_id`` is one of its MuJoCo environments (without importing MuJoCo)."""
    import gymnasium

    spec = gymnasium.registry.get(env_id)
    return spec is not None and isinstance(spec.entry_point, str) and spec.entry_point.startswith(MUJOCO_ENTRY_POINTS)


def _warning(message: str) -> None:
    """MuJoCo's own handling of a warning (a log line, then the message on stderr), except for the
    shipped models' deprecations."""
    if SHIPPED_MODEL_DEPRECATIONS.search(message):
        return
    mujoco: Any = sys.modules["mujoco"]
    mujoco.mju_writeLog("WARNING", message)
    sys.stderr.write(f"WARNING: {message}\n\n")
