"""ToDevice: contents and order kept, sharded over 4 forced CPU devices, the prefetch bound,
producer errors raised to the consumer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import optax
import pytest

from jaxflow import Concurrently, Learner, SampleBatch, TrainOneStep, from_items, from_iterator
from jaxflow.learn.to_device import DeviceBatch, ToDevice, ToDeviceError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FOUR_DEVICES = r"""
import json, numpy as np, optax
from jaxflow import Learner, SampleBatch, from_items
from jaxflow.learn.to_device import ToDevice
learner = Learner(lambda p, b, r: ((p["w"] * b["x"]).sum(), {}), optax.sgd(0.1), {"w": np.float32(1.0)})
items = [{"x": np.arange(16, dtype=np.float32) + 100 * i, "y": np.full((16, 3), i, np.int32)} for i in range(6)]
batches = [SampleBatch(i, 16, np.zeros(0), np.zeros(0), 0) for i in items]
report = {}
for num_stack in (1, 3):  # one transfer per batch, and three batches per transfer
    out = list(ToDevice(from_items(batches), learner, to_host=lambda b: b.data, num_stack=num_stack).take(6))
    report[num_stack] = {
        "equal": all(np.array_equal(np.asarray(o.data[k]), i[k]) for o, i in zip(out, items) for k in i),
        "devices": [len(o.data["x"].sharding.device_set) for o in out],
        "rows_per_shard": sorted({s.data.shape[0] for o in out for s in o.data["y"].addressable_shards}),
    }
print(json.dumps(report))
"""


def test_contents_order_and_sharding_on_four_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", FOUR_DEVICES], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for num_stack in ("1", "3"):
        out = report[num_stack]
        assert out["equal"] is True
        assert out["devices"] == [4] * 6
        assert out["rows_per_shard"] == [4]  # 16 samples over 4 devices


def flat(data: dict) -> SampleBatch:
    """A batch whose learner arrays are ``data`` as it is (``to_host=lambda b: b.data``)."""
    n = len(next(iter(data.values())))
    return SampleBatch(data, n, np.zeros(0), np.zeros(0), 0)


def _learner():
    return Learner(lambda p, b, r: ((p["w"] * b["x"]).sum(), {}), optax.sgd(0.1), {"w": np.float32(1.0)})


def test_stacked_transfers_and_metrics():
    items = [flat({"x": np.full(8, i, np.float32)}) for i in range(6)]
    it = ToDevice(from_items(items), _learner(), to_host=lambda b: b.data, num_stack=2)
    out = it.take(6)
    assert [float(o.data["x"][0]) for o in out] == [0, 1, 2, 3, 4, 5]
    assert all(isinstance(o, DeviceBatch) and o.data["x"].shape == (8,) for o in out)
    stats = it.context.info["to_device"]
    assert stats["transfers"] == 3 and stats["batches"] == 6 and stats["bytes"] == 6 * 8 * 4


def test_prefetch_bound_holds():
    pulled = []

    def source():
        for i in range(100):
            pulled.append(i)
            yield flat({"x": np.full(4, i, np.float32)})

    it = ToDevice(from_iterator(source), _learner(), to_host=lambda b: b.data, num_stack=1, prefetch=2)
    first = next(it)
    time.sleep(0.5)  # the thread runs ahead as far as it may
    # Consumed 1; 2 transfers wait in the queue; 1 more is built and blocked on the full queue.
    assert float(first.data["x"][0]) == 0
    assert len(pulled) <= 1 + 2 + 1
    rest = it.take(5)
    assert [float(o.data["x"][0]) for o in rest] == [1, 2, 3, 4, 5]
    assert len(pulled) <= 6 + 2 + 1


def test_feeder_ends_when_the_plan_around_it_stops():
    # Concurrently gives its ops the plan's stop flag after ToDevice was built; the feeder,
    # waiting on a full queue no one reads any more, must still see the plan stop.
    def endless():
        while True:
            yield flat({"x": np.ones(4, np.float32)})

    feed = ToDevice(from_iterator(endless), _learner(), to_host=lambda b: b.data, prefetch=1)
    plan = Concurrently([feed, from_iterator(lambda: iter(range(10**9)))], mode="async", output_indexes=[1])
    next(plan)
    plan.stop()
    assert plan.join(5.0)


def test_producer_error_reaches_the_consumer():
    def source():
        yield flat({"x": np.ones(4, np.float32)})
        raise RuntimeError("env exploded")

    it = ToDevice(from_iterator(source), _learner(), to_host=lambda b: b.data)
    next(it)
    done = threading.Event()
    with pytest.raises(ToDeviceError, match="env exploded"):
        next(it)
        done.set()
    assert not done.is_set()


def test_uneven_batch_fails_clearly_instead_of_hanging():
    learner = _learner()
    learner.devices = learner.devices * 2  # pretend there are two devices
    with pytest.raises(ToDeviceError, match="cannot be split evenly over 2 devices"):
        next(ToDevice(from_items([flat({"x": np.ones(3, np.float32)})]), learner, to_host=lambda b: b.data))


def test_train_one_step_trains_on_device_batches_and_counts_their_env_steps():
    learner = _learner()
    fragments = [SampleBatch({"x": np.full((4, 2), 1.0, np.float32)}, 8, np.zeros(0), np.zeros(0), 0) for _ in range(3)]
    trained = ToDevice(from_items(fragments), learner).for_each(TrainOneStep(learner))
    metrics = trained.take(3)
    # loss = w * sum(x) over 8 samples: d/dw = 8, so three SGD steps of 0.1 take w from 1 to -1.4.
    assert learner.version == 3 and np.isclose(float(learner.get_weights()["w"]), 1.0 - 3 * 0.1 * 8)
    assert metrics[0]["loss"] == 8.0
    assert trained.context.counters["env_steps_trained"] == 24 and trained.context.counters["num_updates"] == 3
