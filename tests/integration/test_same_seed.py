"""Same seed, same run: two runs of one config give the same results and the same state, bit
for bit, for every algorithm whose plan allows it (docs/algorithms.md, "Same seed, same run"):
the replay algorithms with ``deterministic=True``, the others as they are; the asynchronous
plans refuse ``deterministic=True`` in one line. ES in Ray mode is checked bit for bit against
runs with failed workers in ``test_es_faults.py``, device mode's seeds in ``test_anakin.py``."""

from __future__ import annotations

import math
import re
from typing import Any

import jax
import numpy as np
import pytest

from jaxflow import Algorithm
from jaxflow.api.program import resolve_mode
from jaxflow.api.registry import get_algorithm
from jaxflow.config import ConfigError, make_config

ITERATIONS = 2
SEED = 3

TIMING = re.compile(r"(^|/)(sampler|queues)/|_s$")
"""Result keys that measure time (``time_s``, ``env_steps_per_s``, the workers' and queues'
seconds): the only numbers two runs of one seed may disagree on."""

POLICY_GRADIENT = dict(num_envs_per_worker=2, rollout_fragment_length=32, train_batch_size=128, hidden_sizes=(16,))
REPLAY = dict(
    deterministic=True,
    num_envs_per_worker=2,
    rollout_fragment_length=16,
    train_batch_size=32,
    buffer_size=1000,
    learning_starts=64,
    min_env_steps_per_iteration=128,
    hidden_sizes=(16,),
)
SEARCH = dict(population_size=4, noise_table_size=100_000, hidden_sizes=(4,))
TWO_WORKERS = dict(mode="ray", num_workers=2)
ONE_WORKER = dict(mode="ray", num_workers=1)
IN_DRIVER = dict(mode="ray", num_workers=0)
"""A Ray worker takes seconds to start (most of a case's time), so only the plans this suite's
time allows get real ones: the lockstep plan (DQN with two workers and two shard actors, SAC's
one worker over the replay in the driver: DQN's case already gathers two workers' fragments in
the lockstep plan SAC shares) and a multi-agent replay policy's shard actor. A2C runs PPO's
plan on the in-driver worker, DQN's default plan runs there too, ARS in device mode (ES's Ray plan is checked in
``test_es_faults.py``). PPO and DD-PPO with workers, Rainbow, TD3, DDPG (DQN's plans) and MAML
were checked alike when ``deterministic`` came (docs/algorithms.md, "Same seed, same run"), and
are left out here for the suite's time: their cases took 91 s of this module's 146."""

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # two shard actors: each round's stores and samples reach both in turn
    "DQN": ("DQN", dict(REPLAY, num_replay_shards=2, **TWO_WORKERS)),
    "SAC": ("SAC", dict(REPLAY, env="Pendulum-v1", replay_in_driver=True, **ONE_WORKER)),
    "MULTIAGENT": (
        "MULTIAGENT",
        dict(
            env="multiagent/Coordination-v0",
            policies={
                "ppo": {"algorithm": "PPO", "config": {"train_batch_size": 64, "minibatch_size": 32}},
                "dqn": {"algorithm": "DQN", "config": {"learning_starts": 32, "train_batch_size": 16}},
            },
            mapping={"agent_0": "ppo", "agent_1": "dqn"},
            num_workers=1,  # and the DQN policy's shard actor
            num_envs_per_worker=2,
            rollout_fragment_length=16,
            min_env_steps_per_iteration=512,
        ),
    ),
    "A2C": ("A2C", dict(POLICY_GRADIENT, **IN_DRIVER)),
    # DQN's default (asynchronous) plan is deterministic without workers too
    "DQN-no-workers": ("DQN", dict(REPLAY, deterministic=False, **IN_DRIVER)),
    "ARS": ("ARS", dict(SEARCH, env="gymnax/CartPole-v1", top_directions=1)),
}


def numbers(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number of a result (nested keys joined by "/"), timings left out."""
    out: dict[str, float] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(numbers(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and not TIMING.search(name):
            out[name] = float(value)
    return out


def run(algo: str, fields: dict[str, Any]) -> tuple[list[dict[str, float]], list[np.ndarray]]:
    """``ITERATIONS`` results of a run of ``SEED`` and its state's arrays at the end."""
    algorithm = Algorithm.build(algo, seed=SEED, **fields)
    try:
        results = [numbers(algorithm.train()) for _ in range(ITERATIONS)]
        return results, [np.asarray(leaf) for leaf in jax.tree.leaves(algorithm.program.get_state())]
    finally:
        algorithm.stop()


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))  # no episode ended yet: NaN in both


@pytest.mark.parametrize("case", list(CASES))
def test_two_runs_of_one_seed_give_the_same_results_and_weights(ray_local, case):
    algo, fields = CASES[case]
    (first, first_state), (second, second_state) = run(algo, fields), run(algo, fields)
    assert first[-1]["num_updates"] > 0  # both runs trained: the weights compared are learned ones
    for i, (a, b) in enumerate(zip(first, second)):
        assert a.keys() == b.keys()
        differ = {k: (a[k], b[k]) for k in a if not same(a[k], b[k])}
        assert not differ, f"iteration {i + 1}: {differ}"
    assert len(first_state) == len(second_state)
    for x, y in zip(first_state, second_state):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("algo", ["IMPALA", "APPO", "A3C", "APEX", "APEX_DDPG", "R2D2"])
def test_asynchronous_plans_refuse_deterministic_in_ray_mode(algo):
    spec = get_algorithm(algo)
    env = "Pendulum-v1" if algo == "APEX_DDPG" else "CartPole-v1"
    config = make_config(spec.config_cls, env=env, mode="ray", deterministic=True)
    where = "it has no deterministic plan" if spec.run.device is None else "it is deterministic in device mode"
    with pytest.raises(
        ConfigError, match=rf"deterministic=True: {algo}'s Ray-mode plan is asynchronous by design \(.*\); {where}"
    ):
        resolve_mode(config, spec)
    assert resolve_mode(make_config(spec.config_cls, env=env, mode="ray"), spec) == "ray"


def test_deterministic_is_allowed_where_the_mode_is_deterministic():
    impala = get_algorithm("IMPALA")
    config = make_config(impala.config_cls, env="gymnax/CartPole-v1", deterministic=True)
    assert resolve_mode(config, impala) == "device"  # "auto" picks device mode, deterministic there


def test_deterministic_refuses_workers_sampling_ahead():
    dqn = get_algorithm("DQN")
    with pytest.raises(ConfigError, match="deterministic=True with sample_async=True"):
        make_config(dqn.config_cls, deterministic=True, sample_async=True)
