"""Which Ray a command runs on: with a Ray running on the machine (this session's), no address
starts a local Ray of the command's own; ``RAY_ADDRESS``, ``--address HOST:PORT`` and
``--address auto`` join a running one, and the command says which in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

RUN_TIMEOUT_S = 300
CHOICES = """
import json, os, ray
from jaxflow.api.ray_program import init_ray

session = os.environ.pop("RAY_ADDRESS")
joined = {}
for name, address, environment in [("none", None, None), ("env", None, session), ("given", session, None), ("auto", "auto", None)]:
    if environment is not None:
        os.environ["RAY_ADDRESS"] = environment
    said = init_ray(address)
    joined[name] = [said, ray.get_runtime_context().gcs_address]
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)
print(json.dumps(joined))
"""


def _without_ray_address() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


@pytest.fixture
def started_cluster(ray_local):
    """What ``ray start`` leaves on a machine, with this session's Ray as the cluster: its
    address in ``ray_current_cluster`` under Ray's temporary folder (a folder of this test's,
    ``RAY_TMPDIR``, short for Ray's socket paths), which Ray's own ``init()`` joins."""
    folder = tempfile.mkdtemp(prefix="rt")
    os.makedirs(os.path.join(folder, "ray"))
    with open(os.path.join(folder, "ray", "ray_current_cluster"), "w", encoding="utf-8") as f:
        f.write(os.environ["RAY_ADDRESS"])
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_no_address_starts_a_ray_of_its_own(started_cluster):
    """With a cluster started on the machine, a process without ``RAY_ADDRESS`` starts a Ray of
    its own where no address is given; it joins the cluster where the variable or the address
    names it, or with ``auto``."""
    session = os.environ["RAY_ADDRESS"]
    done = subprocess.run(
        [sys.executable, "-c", CHOICES],
        env=dict(os.environ, RAY_TMPDIR=started_cluster),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    joined = json.loads(done.stdout.strip().splitlines()[-1])
    said, own = joined["none"]
    assert said is None and own != session  # Ray's init() would have joined the cluster started here
    assert joined["env"] == [f"{session} (RAY_ADDRESS): 1 node, 2 CPUs", session]
    assert joined["given"] == [f"{session}: 1 node, 2 CPUs", session]
    assert joined["auto"] == [f"{session}: 1 node, 2 CPUs", session]


def test_train_names_the_cluster_it_joins(ray_local, tmp_path):
    session = os.environ["RAY_ADDRESS"]
    argv = ["train", "--algo", "PPO", "--num-workers", "0", "--address", session, "--stop", "training_iteration=1"]
    argv += ["--set", "rollout_fragment_length=32", "--set", "train_batch_size=64", "--set", "minibatch_size=32"]
    done = subprocess.run(
        [sys.executable, "-m", "jaxflow.api.cli", *argv, "--logdir", str(tmp_path / "run")],
        env=_without_ray_address(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"\njaxflow: joined the Ray cluster at {session}: 1 node, 2 CPUs\n" in done.stdout
