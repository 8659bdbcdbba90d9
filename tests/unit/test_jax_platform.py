"""envs picks JAX's CPU platform in a process that sees no GPU (a Ray actor on a GPU node)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import envs, jax; print(jax.config.jax_platforms or '-', jax.default_backend())"


def platform_after_importing_envs(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[-2]


@pytest.mark.parametrize("env, expected", [
    # What Ray gives an actor that asked for no GPU, on a node with GPUs.
    ({"CUDA_VISIBLE_DEVICES": ""}, "cpu cpu"),
    # A platform the user chose stays chosen.
    ({"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu,cuda"}, "cpu,cuda cpu"),
    # GPUs visible (or no GPU machinery at all): JAX's own choice.
    ({"CUDA_VISIBLE_DEVICES": "0"}, "- cpu"),
    ({}, "- cpu"),
])
def test_envs_runs_jax_on_the_cpu_where_no_gpu_is_visible(env, expected):
    assert platform_after_importing_envs(**env) == expected
