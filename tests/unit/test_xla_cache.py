"""jaxflow's persistent XLA compilation cache (jaxflow/dataflow/xla_cache.py): a second process
loads what a first one compiled, and a JAX cache the user (or this test
session, see conftest.py) chose is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax

from jaxflow.dataflow import xla_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A fresh process, as a restored run's or a restarted worker's: puts itself on the cache, then
# compiles a function and reports JAX's cache hits and what a JAX actor it started would be given.
COMPILE = """
import json, jax, jax.numpy as jnp
from jaxflow.dataflow import xla_cache
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
directory = xla_cache.use_in_this_process()
jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 8))).block_until_ready()
print(json.dumps(dict(directory=directory, hits=len(hits), actor_env=xla_cache.actor_env())))
"""


def run_fresh(tmp_path, switch: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}  # no cache chosen: the user's default
    env.update(JAX_PLATFORMS="cpu", JAXFLOW_XLA_CACHE=switch, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    cache = str(tmp_path / "xla")
    first = run_fresh(tmp_path, cache)
    assert first["directory"] == cache and first["hits"] == 0
    assert len(os.listdir(cache)) >= 1
    assert first["actor_env"]["JAX_COMPILATION_CACHE_DIR"] == cache  # its JAX actors share it
    second = run_fresh(tmp_path, cache)
    assert second["hits"] >= 1  # (JAXFLOW_XLA_CACHE=off: cache_settings' doctest)


def test_a_cache_chosen_outside_jaxflow_is_left_alone():
    chosen = os.environ["JAX_COMPILATION_CACHE_DIR"]  # this session's (conftest.py)
    assert xla_cache.use_in_this_process() == chosen
    assert jax.config.jax_compilation_cache_dir == chosen
    assert xla_cache.actor_env() == {}
