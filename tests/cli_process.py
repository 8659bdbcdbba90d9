"""``jaxflow`` in a new process, as a user runs it: what the tests that need a fresh Python
process (nothing imported, nothing registered) share."""

from __future__ import annotations

import os
import subprocess
import sys

CLI_TIMEOUT_S = 300
"""How long one command may take (a run that starts Ray actors on a loaded machine)."""


def jaxflow_process(cwd, argv: list[str], pythonpath: str | None = None) -> subprocess.CompletedProcess:
    """``jaxflow ARGV`` in a new process run in ``cwd``, its output captured. ``pythonpath``
    replaces the ``PYTHONPATH`` it inherits ("" : none); None keeps this process's."""
    env = dict(os.environ)
    if pythonpath is not None:
        env.pop("PYTHONPATH", None)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-m", "jaxflow.api.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
