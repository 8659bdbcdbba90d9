"""One persistent XLA compilation cache for the driver and every JAX actor it starts, so that a
process that compiles what an earlier one already compiled (a restored run's learner and new
rollout workers, a rollout worker or replay shard restarted after a failure, the next run of the
same config) loads it from disk instead.

The cache is JAX's own (``jax_compilation_cache_dir``), in ``$JAXFLOW_XLA_CACHE`` or by default
``$XDG_CACHE_HOME/jaxflow/xla`` (``~/.cache/jaxflow/xla``); ``JAXFLOW_XLA_CACHE=off`` turns it
off. Where the process already has a JAX cache directory (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update``), that one is left as it is and jaxflow sets nothing, in the driver or the
actors. Every compiled function is kept (the default threshold of one second of compile time
would skip a rollout worker's functions), and the cache has a maximum size, which also turns on
JAX's file lock so that processes writing and reading at once never see half an entry. The path
is the driver's: on a cluster each node keeps its own files there.

This module imports no JAX at the top (see :mod:`jaxflow.dataflow.jax_process`).
"""

from __future__ import annotations

import os

CACHE_VARIABLE = "JAXFLOW_XLA_CACHE"
"""A directory, or ``off``; unset: :func:`default_directory`."""
OFF = "off"
MAX_SIZE_BYTES = 2 * 2**30
"""The least recently used entries are deleted beyond this (a CartPole run writes about 1 MB)."""
MIN_COMPILE_TIME_S = 0.0
DIRECTORY_FLAG = "jax_compilation_cache_dir"


def default_directory() -> str:
    """``$XDG_CACHE_HOME/jaxflow/xla``, or ``~/.cache/jaxflow/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxflow", "xla")


def cache_settings(environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    """The JAX variables (``JAX_COMPILATION_CACHE_DIR`` and its thresholds) that put a process
    on jaxflow's cache; empty when it is off or the environment names a JAX cache of its own.

    Example:
        >>> cache_settings({"JAXFLOW_XLA_CACHE": "/tmp/xla"})["JAX_COMPILATION_CACHE_DIR"]
        '/tmp/xla'
        >>> cache_settings({"JAXFLOW_XLA_CACHE": "off"})
        {}
        >>> cache_settings({"JAX_COMPILATION_CACHE_DIR": "/mine"})
        {}
    """
    chosen = environ.get(CACHE_VARIABLE, "")
    if chosen.lower() == OFF or environ.get("JAX_COMPILATION_CACHE_DIR"):
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": os.path.abspath(os.path.expanduser(chosen or default_directory())),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(MIN_COMPILE_TIME_S),
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",  # no size threshold: every entry kept
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(MAX_SIZE_BYTES),
    }


def actor_env() -> dict[str, str]:
    """What a JAX actor's runtime env sets so that it shares this process's cache: JAX reads
    these variables at import, before any code of ours runs there. Empty where this process's
    JAX has a cache directory that jaxflow did not set (the actors inherit that choice or not,
    as the user arranged)."""
    settings = cache_settings()
    if not settings:
        return {}
    import jax

    configured = getattr(jax.config, DIRECTORY_FLAG)  # (not in jax.config's type stubs)
    return settings if configured in (None, settings["JAX_COMPILATION_CACHE_DIR"]) else {}


def use_in_this_process() -> str | None:
    """Puts this process's JAX on the cache, unless it has a cache directory already; returns
    the directory in use (None: no cache). JAX decides once, at its first compilation, whether
    it caches, so that decision is reset here."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    configured: str | None = getattr(jax.config, DIRECTORY_FLAG)
    settings = cache_settings()
    if configured is not None or not settings:
        return configured
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_max_size", MAX_SIZE_BYTES)
    jax.config.update(DIRECTORY_FLAG, settings["JAX_COMPILATION_CACHE_DIR"])
    compilation_cache.reset_cache()
    return settings["JAX_COMPILATION_CACHE_DIR"]
