"""A trained policy for someone without jaxflow: the parameters as data, a description of the
network, and the greedy policy compiled with ``jax.export``, loadable with JAX and numpy alone.

``export_policy(checkpoint, out)`` writes three files into ``out``, a new folder (or, with
``overwrite``, an earlier export, never anything else: :mod:`jaxflow.api.outputs`):

* ``policy.jaxexport`` -- the serialized ``jax.export.Exported`` of
  ``act(params, obs) -> actions``: observations ``[B, *obs_shape]`` (any ``B``) to the actions
  the environment takes (a ``Box``'s rescaled to its bounds), greedy as ``jaxflow evaluate``
  plays, with the run's observation normalization inside;
* ``params.npz`` -- its first argument: every array under a ``/``-joined name, so
  ``dict(numpy.load(path))`` is exactly what ``act`` takes;
* ``policy.json`` -- what the policy is: algorithm, env, spaces, the network (the config's
  model and sizes), the run's config, and these file names.

Loading (JAX and numpy only)::

    import jax, numpy as np
    act = jax.export.deserialize(open("DIR/policy.jaxexport", "rb").read())
    actions = act.call(dict(np.load("DIR/params.npz")), observations)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxflow.api.algorithm import find_checkpoint, load_policy
from jaxflow.api.outputs import DESCRIPTION_FILE, EXPORT, EXPORTED_FILE, PARAMS_FILE, claim_output, written
from jaxflow.api.registry import get_algorithm
from jaxflow.api.spaces import env_spaces
from jaxflow.config.fields import ConfigError
from jaxflow.config.parsing import to_json_dict
from jaxflow.policies.policy import Policy
from jaxflow.rollout.normalize import Moments, Normalizer, normalize_observations

EXPORT_FORMAT = 1
SEPARATOR = "/"
BATCH_DIM = "batch"
"""The exported function's batch dimension is symbolic: one artifact for any batch size."""


def flatten_arrays(tree: Any) -> dict[str, np.ndarray]:
    """``{"a/b/c": array}`` for a nested mapping of arrays (flax parameters).

    Example:
        >>> flatten_arrays({"params": {"Dense_0": {"bias": np.zeros(2)}}})
        {'params/Dense_0/bias': array([0., 0.])}
    """
    out: dict[str, np.ndarray] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update({f"{key}{SEPARATOR}{k}": v for k, v in flatten_arrays(value).items()})
        else:
            out[str(key)] = np.asarray(value)
    return out


def unflatten_arrays(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The nested mapping :func:`flatten_arrays` came from."""
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        *path, leaf = name.split(SEPARATOR)
        node = tree
        for key in path:
            node = node.setdefault(key, {})
        node[leaf] = value
    return tree


def greedy_actions(policy: Policy, clip: float) -> Callable[[Mapping[str, Any], jax.Array], jax.Array]:
    """``act(flat, obs)``: the greedy action the environment takes for each observation, where
    ``flat`` holds the parameters under ``params/...`` and, for a run that normalizes
    observations, its statistics under ``normalizer/...``."""

    def act(flat: Mapping[str, Any], obs: jax.Array) -> jax.Array:
        data = unflatten_arrays(flat)
        if "normalizer" in data:
            obs = normalize_observations(Moments(**data["normalizer"]), obs, clip)
        return policy.distribution.to_env(policy.greedy(data["params"], obs))

    return act


def export_policy(checkpoint: str, out: str, member: int | str | None = None, overwrite: bool = False) -> str:
    """Writes the greedy policy of the run saved at ``checkpoint`` (a checkpoint or a run
    directory: its newest; of a device-mode run of several members, ``member``, by default
    the best one a PBT run marks, see :func:`~jaxflow.api.algorithm.pick_member`) into
    ``out``, a new folder, never left half-written; an existing ``out`` is refused before the
    checkpoint is read, unless ``overwrite`` and it is an earlier export (then replaced as a
    whole). Returns ``out``."""
    claim_output(out, EXPORT, overwrite)
    ckpt, meta = find_checkpoint(checkpoint)
    config, policy, params, normalizer = load_policy(ckpt, member)
    if policy.recurrent:
        raise ConfigError(
            f"export: {ckpt} holds a recurrent policy (use_lstm), whose actions depend on a state this "
            "format does not carry yet; play it with Algorithm.restore(...).compute_actions(obs, state=...) or jaxflow evaluate."
        )
    obs_space, action_space = env_spaces(config, get_algorithm(meta["algorithm"]))
    flat = _data(params, normalizer)
    obs = jax.ShapeDtypeStruct(
        (*jax.export.symbolic_shape(BATCH_DIM), *(obs_space.shape or ())), jnp.dtype(obs_space.dtype)
    )
    args = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in flat.items()}
    exported = jax.export.export(jax.jit(greedy_actions(policy, config.rollout.normalize_clip)))(args, obs)
    description = {
        "format": EXPORT_FORMAT,
        "algorithm": meta["algorithm"],
        "env": config.env,
        "checkpoint": os.path.abspath(ckpt),
        "observation": {"shape": list(obs_space.shape or ()), "dtype": str(obs_space.dtype)},
        "action_space": str(action_space),
        "network": {"model": config.model, "model_config": config.model_config, "hidden_sizes": config.hidden_sizes},
        "files": {"exported": EXPORTED_FILE, "params": PARAMS_FILE},
        "config": to_json_dict(config),
    }
    with written(out, EXPORT, overwrite) as folder:
        _write(folder, exported.serialize(), flat, description)
    return out


def _data(params: Any, normalizer: Normalizer | None) -> dict[str, np.ndarray]:
    data: dict[str, Any] = {"params": jax.device_get(params)}
    if normalizer is not None and normalizer.obs is not None:
        # float32 like everything the compiled policy computes in (x64 is off in JAX by default)
        data["normalizer"] = {k: np.asarray(v, np.float32) for k, v in normalizer.obs._asdict().items()}
    return flatten_arrays(data)


def _write(folder: str, exported: bytearray, flat: Mapping[str, np.ndarray], description: Mapping[str, Any]) -> None:
    """The three files into ``folder`` (the temporary one :func:`~jaxflow.api.outputs.written` moves into place)."""
    with open(os.path.join(folder, EXPORTED_FILE), "wb") as f:
        f.write(exported)
    arrays: dict[str, Any] = dict(flat)  # Any: ``**arrays`` must also fit savez's ``allow_pickle: bool``
    np.savez(os.path.join(folder, PARAMS_FILE), **arrays)
    with open(os.path.join(folder, DESCRIPTION_FILE), "w", encoding="utf-8") as f:
        json.dump(description, f, indent=1, default=str)
