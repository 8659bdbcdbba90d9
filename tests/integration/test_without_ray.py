"""A Ray-mode run with nothing outside the driver's process (``num_workers=0``, its replay in
the driver) trains, saves and restores without starting Ray; anything that lives in another
process (workers, replay shard actors, an evaluation actor, a learner group) still starts it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jaxflow import get_algorithm
from jaxflow.api.ray_program import needs_ray
from jaxflow.config import make_config

# Checked in a process of its own: this one's session fixture may have started Ray already.
# Each run trains an iteration, is saved and restored, and trains once more.
SCRIPT = """
import json, os, sys
import ray
from jaxflow import Algorithm

runs = {
    "PPO": dict(train_batch_size=128, minibatch_size=64, num_epochs=1),
    "DQN": dict(learning_starts=100, min_env_steps_per_iteration=256),
}
out = {}
for name, fields in runs.items():
    algo = Algorithm.build(name, env="CartPole-v1", num_workers=0, num_envs_per_worker=4, seed=0, **fields)
    try:
        first = algo.train()["num_updates"]
        path = algo.save(os.path.join(sys.argv[1], name))
        nodes = algo.program.node_ids()  # asked of Ray's runtime context, that would start Ray
    finally:
        algo.stop()
    restored = Algorithm.restore(path)
    try:
        again = restored.train()
    finally:
        restored.stop()
    out[name] = dict(before=first, iteration=again["training_iteration"], after=again["num_updates"],
                     nodes=nodes, ray=ray.is_initialized())
print(json.dumps(out))
"""


def test_ppo_and_dqn_without_workers_never_start_ray(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    for name, run in runs.items():
        assert run["ray"] is False, name
        assert 0 < run["before"] < run["after"], (name, run)  # it trained, and went on after the restore
        assert run["iteration"] == 2, (name, run)  # the restored run continued the saved one
    assert runs["PPO"]["nodes"] == {"workers": {"0": None}, "replay": [], "evaluator": None}
    assert runs["DQN"]["nodes"] == {"workers": {"0": None}, "replay": [None], "evaluator": None}


@pytest.mark.parametrize(
    "algorithm, fields, expected",
    [
        ("PPO", dict(num_workers=0), False),
        ("DQN", dict(num_workers=0), False),
        ("PPO", dict(num_workers=1), True),
        ("PPO", dict(num_workers=0, evaluation_interval=1), True),  # the evaluation actor
        ("DQN", dict(num_workers=0, num_replay_shards=2), True),  # shard actors
        ("DQN", dict(num_workers=0, num_cpus_per_replay_shard=1.0), True),  # a shard placed by Ray
    ],
)
def test_ray_starts_only_for_what_runs_outside_the_driver(algorithm, fields, expected):
    spec = get_algorithm(algorithm)
    assert needs_ray(make_config(spec.config_cls, env="CartPole-v1", **fields), spec) is expected
