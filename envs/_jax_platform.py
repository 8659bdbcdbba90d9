"""Runs JAX on the CPU in a process that sees no GPU.

Ray starts every actor that asked for no GPU with ``CUDA_VISIBLE_DEVICES=""`` on a GPU node
(rollout workers, replay shards). JAX's CUDA plugin, installed there for the learner, then
fails on the first array instead of falling back to the CPU, and gymnax builds arrays when it
is imported, so unpickling any actor that imports ``envs`` died. Imported by ``envs`` before
anything else; a platform chosen with ``JAX_PLATFORMS`` is left alone.
"""

import os

import jax

if os.environ.get("CUDA_VISIBLE_DEVICES") == "" and not os.environ.get("JAX_PLATFORMS"):
    jax.config.update("jax_platforms", "cpu")
