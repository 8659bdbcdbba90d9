"""jaxflow.learn.learner.Learner: one SGD step against a hand-derived gradient, epoch/minibatch
step counts, and data parallelism over several (forced host) devices."""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxflow.config import NO_CLIPPING
from jaxflow.learn.learner import Learner
from jaxflow.learn.reduce import flat_by_default
from jaxflow.learn.sgd import make_optimizer, minibatch_indices, sgd_update, shard_blocks, take_rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mse_loss(params, batch, rng):
    del rng
    pred = batch["x"] @ params["w"] + params["b"]
    loss = jnp.mean(jnp.square(pred - batch["y"]))
    return loss, {"mse": loss}


def regression_problem(n=8, d=3, seed=0):
    rng = np.random.default_rng(seed)
    # Fresh numpy arrays: the learner donates its state, and owns what it is given.
    params = {"w": rng.normal(size=(d,)).astype(np.float32), "b": np.float32(0.3) * np.ones((), np.float32)}
    batch = {"x": rng.normal(size=(n, d)).astype(np.float32), "y": rng.normal(size=(n,)).astype(np.float32)}
    return params, batch


def test_one_update_equals_a_manual_sgd_step():
    params, batch = regression_problem()
    x, y = batch["x"].astype(np.float64), batch["y"].astype(np.float64)
    w, b = params["w"].astype(np.float64), float(params["b"])
    # L = mean((x w + b - y)^2)  =>  dL/dw = 2/n x^T e,  dL/db = 2/n sum(e),  e = x w + b - y
    e = x @ w + b - y
    n = len(y)
    grad_w, grad_b = 2.0 / n * x.T @ e, 2.0 / n * e.sum()
    expected_w, expected_b = w - 0.1 * grad_w, b - 0.1 * grad_b
    expected_loss = np.mean(e**2)  # the loss reported is the one before the step

    learner = Learner(mse_loss, optax.sgd(0.1), {k: v.copy() for k, v in params.items()})
    assert learner.version == 0
    metrics = learner.update(batch)
    new = learner.get_weights()
    np.testing.assert_allclose(new["w"], expected_w, atol=1e-6, rtol=0)
    np.testing.assert_allclose(float(new["b"]), expected_b, atol=1e-6, rtol=0)
    np.testing.assert_allclose(metrics["loss"], expected_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["mse"], expected_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["grad_norm"], np.sqrt((grad_w**2).sum() + grad_b**2), rtol=1e-5)
    assert learner.version == 1 and int(learner.state.step) == 1

    learner.update(batch)
    assert learner.version == 2


def test_no_clipping_is_adam_alone_and_keeps_the_optimizer_states_structure():
    # At NO_CLIPPING the clipping is left out (no norm computed); the state keeps its
    # structure, so a checkpoint restores whichever side of the threshold it was made on.
    params = {"w": jnp.arange(3.0), "b": jnp.ones(())}
    grads = {"w": jnp.array([3e5, -4e5, 1.0]), "b": jnp.array(2.0)}
    unclipped, clipped = make_optimizer(1e-3, NO_CLIPPING), make_optimizer(1e-3, 1.0)
    assert jax.tree.structure(unclipped.init(params)) == jax.tree.structure(clipped.init(params))
    plain = optax.adam(1e-3, eps=1e-5)
    got, _ = unclipped.update(grads, unclipped.init(params), params)
    want, _ = plain.update(grads, plain.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, got, want)

    def reductions(opt):  # a global norm is a sum over every leaf; Adam alone reduces nothing
        jaxpr = jax.make_jaxpr(lambda g: opt.update(g, opt.init(params), params))(grads)
        return sum(e.primitive.name == "reduce_sum" for e in jaxpr.jaxpr.eqns)

    assert reductions(unclipped) == 0 and reductions(clipped) > 0
    scaled = jax.tree.map(lambda g: g / 5e5, grads)  # the global norm is 5e5: clipping to 1 divides by it
    got, _ = clipped.update(grads, clipped.init(params), params)
    want, _ = plain.update(scaled, plain.init(params), params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), got, want)
    assert abs(float(got["b"])) < 0.5e-3  # Adam's eps shows the clipping: 4e-6 / (4e-6 + 1e-5) of the lr


def test_epochs_times_minibatches_optimizer_steps():
    params, batch = regression_problem(n=8)
    learner = Learner(mse_loss, optax.sgd(0.05), params, num_epochs=2, minibatch_size=4)
    metrics = learner.update(batch)
    assert int(learner.state.step) == 4  # 2 epochs x (8 // 4) minibatches
    assert learner.version == 4
    assert np.isfinite(metrics["loss"])
    learner.update(batch)
    assert learner.version == 8 == int(learner.state.step)  # counted on the host, equal to the device's
    learner.set_state(learner.get_state()._replace(step=np.int32(3)))
    assert learner.version == 3


def _manual_sgd_step(params, x, y, lr):
    x, y = x.astype(np.float64), y.astype(np.float64)
    e = x @ params["w"] + params["b"] - y
    return params["w"] - lr * 2.0 / len(y) * x.T @ e, params["b"] - lr * 2.0 / len(y) * e.sum()


def test_one_minibatch_smaller_than_the_batch():
    # 8 samples, minibatch 6, one epoch: 8 // 6 = 1 step on 6 of the samples (the
    # other 2 are dropped, as for every incomplete minibatch). Which 6 is up to
    # the shuffle, so the result must equal the step on exactly one 6-subset.
    params, batch = regression_problem(n=8)
    p64 = {"w": params["w"].astype(np.float64), "b": float(params["b"])}
    learner = Learner(mse_loss, optax.sgd(0.1), params, minibatch_size=6)
    learner.update(batch)
    assert learner.version == 1
    new = learner.get_weights()
    matches = []
    for rows in itertools.combinations(range(8), 6):
        w, b = _manual_sgd_step(p64, batch["x"][list(rows)], batch["y"][list(rows)], 0.1)
        if np.allclose(new["w"], w, atol=1e-6, rtol=0) and abs(float(new["b"]) - b) < 1e-6:
            matches.append(rows)
    assert len(matches) == 1


def test_full_batch_epochs_converge_on_least_squares():
    # Many epochs of full-batch SGD must approach the closed-form least-squares
    # solution: shows the update descends, not merely that it runs.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    true_w = np.array([1.0, -2.0, 0.5], np.float32)
    y = (x @ true_w + 0.7).astype(np.float32)
    learner = Learner(
        mse_loss, optax.sgd(0.1), {"w": np.zeros(3, np.float32), "b": np.zeros((), np.float32)}, num_epochs=200
    )
    learner.update({"x": x, "y": y})
    w = learner.get_weights()
    np.testing.assert_allclose(w["w"], true_w, atol=1e-3)
    np.testing.assert_allclose(float(w["b"]), 0.7, atol=1e-3)


def test_minibatch_larger_than_batch_raises():
    params, batch = regression_problem(n=8)
    learner = Learner(mse_loss, optax.sgd(0.1), params, minibatch_size=16)
    with pytest.raises(ValueError, match="minibatch_size 16 is larger than the batch"):
        learner.update(batch)


MULTI_DEVICE_SCRIPT = textwrap.dedent(
    r"""
    import jax, jax.numpy as jnp, numpy as np, optax
    from jaxflow.learn.learner import Learner

    assert jax.device_count() == 4, jax.devices()
    rng = np.random.default_rng(0)
    params = {
        "w1": rng.normal(size=(5, 16)).astype(np.float32), "b1": np.zeros(16, np.float32),
        "w2": rng.normal(size=(16,)).astype(np.float32) / 4, "b2": np.zeros((), np.float32),
    }

    def loss(p, batch, key):
        h = jnp.tanh(batch["x"] @ p["w1"] + p["b1"])
        err = h @ p["w2"] + p["b2"] - batch["y"]
        return jnp.mean(err**2), {"mean_err": jnp.mean(err)}

    n = 64
    batch = {"x": rng.normal(size=(n, 5)).astype(np.float32), "y": rng.normal(size=n).astype(np.float32)}
    copy = lambda: jax.tree_util.tree_map(np.array, params)
    # Plain SGD: the parameter change is linear in the gradient, so the comparison
    # measures the cross-device gradient mean, not Adam's sign-like first step.
    one = Learner(loss, optax.sgd(0.5), copy(), devices=jax.devices()[:1])
    four = Learner(loss, optax.sgd(0.5), copy(), devices=jax.devices())
    m1, m4 = one.update(batch), four.update(batch)
    p1, p4 = one.get_weights(), four.get_weights()
    leaves = jax.tree_util.tree_leaves
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(p1), leaves(p4)))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(p1), leaves(params)))
    print("DIFF", diff)
    print("MOVED", moved)
    print("LOSS_DIFF", abs(m1["loss"] - m4["loss"]))

    # A convolutional loss takes the host loop on the CPU: it must shard the same way.
    def conv_loss(p, batch, key):
        h = jax.lax.conv_general_dilated(batch["img"], p["k"], (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        err = jnp.tanh(h).reshape(h.shape[0], -1) @ p["w"] - batch["y"]
        return jnp.mean(err**2), {}

    conv_params = {"k": rng.normal(size=(4, 4, 2, 3)).astype(np.float32) / 4, "w": rng.normal(size=(48,)).astype(np.float32) / 5}
    conv_batch = {"img": rng.normal(size=(n, 10, 10, 2)).astype(np.float32), "y": batch["y"]}
    conv_copy = lambda: jax.tree_util.tree_map(np.array, conv_params)
    CONV_LR = 0.05  # 0.5 diverges within the 8 steps, and a diverging run magnifies float order
    conv_one = Learner(
        conv_loss, optax.sgd(CONV_LR), conv_copy(), devices=jax.devices()[:1], num_epochs=2, minibatch_size=16, shuffle_devices=4
    )
    conv_four = Learner(conv_loss, optax.sgd(CONV_LR), conv_copy(), devices=jax.devices(), num_epochs=2, minibatch_size=16)
    conv_one.update(conv_batch), conv_four.update(conv_batch)
    q1, q4 = conv_one.get_weights(), conv_four.get_weights()
    print("CONV_LOOPS", conv_one.loop, conv_four.loop)
    print("CONV_DIFF", max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(q1), leaves(q4))))
    print("CONV_MOVED", max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(q1), leaves(conv_params))))
    # The host loop's steps with the flat reduce (blocks under shard_map, one step per call).
    conv_flat = Learner(
        conv_loss, optax.sgd(CONV_LR), conv_copy(), devices=jax.devices(), num_epochs=2, minibatch_size=16, flat_reduce=True
    )
    conv_flat.update(conv_batch)
    q_flat = conv_flat.get_weights()
    print("CONV_FLAT", conv_flat.loop, conv_flat.flat_reduce, max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(q1), leaves(q_flat))))

    # Several epochs: minibatches shuffled within each device's rows (one learner told of 4
    # devices shuffles alike), so only parameter-shaped arrays cross devices, never rows.
    import re
    def row_collectives(learner, placed=None):
        placed = learner.put_batch(batch) if placed is None else placed
        hlo = learner._update.lower(learner.state, placed).compile().as_text()
        shapes = [l.split(" all-")[0] for l in hlo.splitlines() if re.search(r" (all-reduce|all-gather|all-to-all|collective-permute)(-start)?\(", l)]
        return len(shapes), sum(bool(re.search(r"\[8[,\]]", s)) for s in shapes)
    ep_one = Learner(loss, optax.sgd(0.01), copy(), devices=jax.devices()[:1], num_epochs=2, minibatch_size=8, shuffle_devices=4)
    ep_four = Learner(loss, optax.sgd(0.01), copy(), devices=jax.devices(), num_epochs=2, minibatch_size=8)
    ep_one.update(batch), ep_four.update(batch)
    print("EPOCH_DIFF", max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(ep_one.get_weights()), leaves(ep_four.get_weights()))))
    print("BLOCK_COLLECTIVES", *row_collectives(ep_four))
    # Whole minibatches on 4 devices: the batch is gathered onto every device once, before
    # the update, whose SGD steps then move nothing across devices.
    whole = Learner(loss, optax.sgd(0.5), copy(), devices=jax.devices(), num_epochs=2, minibatch_size=8, shuffle_devices=1)
    whole_one = Learner(loss, optax.sgd(0.5), copy(), devices=jax.devices()[:1], num_epochs=2, minibatch_size=8)
    whole.update(batch), whole_one.update(batch)
    print("WHOLE_DIFF", max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(whole.get_weights()), leaves(whole_one.get_weights()))))
    print("WHOLE_COLLECTIVES", *row_collectives(whole, whole._gather(whole.put_batch(batch))))

    # Blocks with one flat all-reduce a step (jaxflow.learn.reduce, the blocks of CPUs of
    # several processes), on this process's 4 devices: equal to one device shuffling alike
    # (plain SGD, so a sum in place of the mean would show), per-sample metrics in order.
    def flat_pair(loss_fn, optimizer, **kw):
        flat = Learner(loss_fn, optimizer, copy(), devices=jax.devices(), flat_reduce=True, **kw)
        one = Learner(loss_fn, optimizer, copy(), devices=jax.devices()[:1], shuffle_devices=4, **kw)
        return flat, one, flat.update(batch), one.update(batch)
    def max_diff(a, b):
        return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(leaves(a), leaves(b)))
    flat, flat_one, mf, mo = flat_pair(loss, optax.sgd(0.05), num_epochs=2, minibatch_size=8)
    print("FLAT_MODE", flat.flat_reduce, flat_one.flat_reduce)
    print("FLAT_DIFF", max_diff(flat.get_weights(), params), max_diff(flat.get_weights(), flat_one.get_weights()))
    print("FLAT_METRICS", sorted(mf) == sorted(mo), max(abs(mf[k] - mo[k]) for k in mo))
    def per_sample_loss(p, b, key):
        l, m = loss(p, b, key)
        return l, dict(m, err=jnp.tanh(b["x"] @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - b["y"])
    _, _, pf, po = flat_pair(per_sample_loss, optax.sgd(0.5))  # one step on the whole batch
    print("FLAT_PER_SAMPLE", pf["err"].shape[0], float(np.max(np.abs(pf["err"] - po["err"]))))
    # A NaN in the last device's rows, in every minibatch: no step applies, on any device.
    nan_batch = dict(batch, y=batch["y"].copy())
    nan_batch["y"][48:] = np.nan
    guarded = Learner(loss, optax.adam(0.01), copy(), devices=jax.devices(), num_epochs=2, minibatch_size=8,
                      flat_reduce=True, on_nonfinite="skip")
    start = guarded.get_state()
    fraction = guarded.update(nan_batch)["nonfinite_step_fraction"]
    kept = all(np.array_equal(np.asarray(shard.data), want) for now, want in
               zip(leaves((guarded.state.params, guarded.state.opt_state)), leaves((start.params, start.opt_state)))
               for shard in now.addressable_shards)
    print("FLAT_NAN", fraction, kept, guarded.version)
    # The compiled loop body: one all-reduce of one array a step, where the partitioner's
    # blocks reduce each gradient leaf (one all-reduce of many arrays).
    def loop_reduces(learner):
        hlo = learner._update.lower(learner.state, learner.put_batch(batch)).compile().as_text()
        bodies, current, arrays = set(re.findall(r"body=%?([\w.\-]+)", hlo)), None, []
        for line in hlo.splitlines():
            header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
            reduce = re.search(r"=\s*(.*?)\s+all-reduce(?:-start)?\(", line)
            if header:
                current = header.group(1)
            elif reduce and current in bodies:
                arrays.append(len(re.findall(r"[a-z]+[0-9]*\[[0-9,]*\]", reduce.group(1))))
        return arrays
    print("FLAT_LOOP_REDUCES", *loop_reduces(flat))
    print("SPMD_LOOP_REDUCES", *loop_reduces(ep_four))

    placed = four.put_batch(batch)["x"]
    print("BATCH_DEVICES", placed.sharding.num_devices, len(placed.addressable_shards))
    print("SHARD_ROWS", sorted({s.data.shape[0] for s in placed.addressable_shards}))
    print("PARAMS_REPLICATED", all(l.sharding.is_fully_replicated and l.sharding.num_devices == 4 for l in leaves(four.state.params)))
    print("ONE_DEVICE", one.put_batch(batch)["x"].sharding.num_devices)
    try:
        four.put_batch({k: v[:62] for k, v in batch.items()})
    except ValueError as e:
        print("UNEVEN", "62 samples" in str(e) and "4 devices" in str(e))
    else:
        print("UNEVEN no error")
    """
)


@pytest.fixture(scope="module")
def multi_device_output() -> dict[str, str]:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", MULTI_DEVICE_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value
    return out


def test_four_devices_match_one_device(multi_device_output):
    assert float(multi_device_output["MOVED"]) > 1e-3  # the update did something to compare
    assert float(multi_device_output["DIFF"]) < 1e-5
    assert float(multi_device_output["LOSS_DIFF"]) < 1e-5


def test_four_devices_match_one_device_in_the_host_loop(multi_device_output):
    assert multi_device_output["CONV_LOOPS"] == "host host"
    assert float(multi_device_output["CONV_MOVED"]) > 1e-3
    assert float(multi_device_output["CONV_DIFF"]) < 1e-5
    loop, flat, flat_diff = multi_device_output["CONV_FLAT"].split()
    assert loop == "host" and flat == "True" and float(flat_diff) < 1e-5


def test_epochs_shuffle_within_each_devices_rows_and_match_one_device(multi_device_output):
    """Minibatches of 8 over 4 devices, 2 epochs: each device gathers its 2 rows of a
    minibatch from its own 16, so the compiled update moves only gradients across devices;
    one device told to shuffle for 4 updates alike. Whole minibatches instead gather the
    batch onto every device once, and their steps move nothing."""
    assert float(multi_device_output["EPOCH_DIFF"]) < 1e-5
    collectives, with_rows = map(int, multi_device_output["BLOCK_COLLECTIVES"].split())
    assert collectives >= 1 and with_rows == 0  # the gradients cross devices; no row does
    # Whole minibatches: the batch gathered once per update, the steps local to each device.
    assert multi_device_output["WHOLE_COLLECTIVES"] == "0 0"
    assert float(multi_device_output["WHOLE_DIFF"]) < 1e-5


def test_flat_reduce_equals_one_device_with_one_all_reduce_a_step(multi_device_output):
    """Blocks under shard_map (jaxflow.learn.reduce) on 4 devices of one process: the update,
    its metrics and per-sample metrics (in the batch's order) as one device's; in the loop
    body one all-reduce of one array per SGD step, where the partitioner's blocks reduce
    several arrays (the gradient leaves and the loss's scalars)."""
    assert multi_device_output["FLAT_MODE"] == "True False"
    moved, diff = map(float, multi_device_output["FLAT_DIFF"].split())
    assert moved > 1e-2 and diff < 1e-5  # the update did something to compare
    same_keys, metrics_diff = multi_device_output["FLAT_METRICS"].split()
    assert same_keys == "True" and float(metrics_diff) < 1e-5
    size, err_diff = multi_device_output["FLAT_PER_SAMPLE"].split()
    assert int(size) == 64 and float(err_diff) < 1e-5
    assert multi_device_output["FLAT_LOOP_REDUCES"] == "1"
    assert sum(map(int, multi_device_output["SPMD_LOOP_REDUCES"].split())) > 1


def test_flat_reduce_skips_a_step_nonfinite_on_one_device_on_every_device(multi_device_output):
    """NaN targets in the last device's rows (a part of every minibatch): every step is
    counted non-finite and leaves parameters and Adam state as they were, on all 4 devices."""
    fraction, kept, version = multi_device_output["FLAT_NAN"].split()
    assert float(fraction) == 1.0 and kept == "True" and int(version) == 16  # 2 epochs x 8 minibatches


def test_flat_reduce_by_default_on_cpus_of_several_processes():
    cpu = [types.SimpleNamespace(process_index=i // 2, platform="cpu") for i in range(4)]
    gpu = [types.SimpleNamespace(process_index=i // 2, platform="gpu") for i in range(4)]
    assert flat_by_default(cpu) and not flat_by_default(cpu[:2]) and not flat_by_default(gpu)


def test_four_device_learner_shards_batch_and_replicates_params(multi_device_output):
    assert multi_device_output["BATCH_DEVICES"] == "4 4"
    assert multi_device_output["SHARD_ROWS"] == "[16]"  # 64 samples / 4 devices
    assert multi_device_output["PARAMS_REPLICATED"] == "True"
    assert multi_device_output["ONE_DEVICE"] == "1"


def test_uneven_batch_raises(multi_device_output):
    assert multi_device_output["UNEVEN"] == "True"


def test_learner_leaves_the_callers_params_alive():
    params = {"w": jnp.ones((3,), jnp.float32)}
    learner = Learner(lambda p, b, k: (jnp.sum(p["w"] * b["x"].mean(0)), {}), optax.sgd(0.1), params)
    learner.update({"x": np.ones((4, 3), np.float32)})
    np.testing.assert_array_equal(np.asarray(params["w"]), np.ones(3))  # not donated away


def conv_loss(params, batch, rng, per_sample=False):
    """A small convolutional regression (optionally with a per-sample metric), for the host loop."""
    del rng
    h = jax.lax.conv_general_dilated(
        batch["x"], params["k"], (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    pred = jnp.tanh(h).reshape(h.shape[0], -1) @ params["w"]
    err = pred - batch["y"]
    return jnp.mean(err**2), {"err": err} if per_sample else {"mean_err": jnp.mean(err)}


def conv_problem(n, seed=0):
    rng = np.random.default_rng(seed)
    params = {
        "k": rng.normal(size=(4, 4, 2, 3)).astype(np.float32) / 4,
        "w": rng.normal(size=(48,)).astype(np.float32) / 5,
    }
    batch = {"x": rng.normal(size=(n, 10, 10, 2)).astype(np.float32), "y": rng.normal(size=(n,)).astype(np.float32)}
    return params, batch


@pytest.mark.parametrize("num_epochs", [1, 3])
def test_convolutional_update_on_cpu_steps_from_the_host_and_equals_the_scanned_update(num_epochs):
    # The host loop exists only for speed (XLA:CPU's convolution gradient in a loop body):
    # its result must be the compiled scan's, step for step, shuffles included.
    params, batch = conv_problem(n=12)
    learner = Learner(
        conv_loss,
        optax.adam(0.05),
        jax.tree_util.tree_map(np.copy, params),
        seed=3,
        num_epochs=num_epochs,
        minibatch_size=4,
    )
    start = learner.get_state()
    metrics = learner.update(batch)
    assert learner.loop == "host"
    assert learner.version == int(learner.state.step) == num_epochs * 3

    optimizer = optax.adam(0.05)
    scan = jax.jit(functools.partial(sgd_update, conv_loss, optimizer, num_epochs, 4))
    expected_state, expected = jax.device_get(scan(start, batch))
    leaves = jax.tree_util.tree_leaves
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(learner.get_weights()), leaves(params)))
    assert moved > 1e-2  # the update did something to compare
    for got, want in zip(leaves(learner.get_state()), leaves(expected_state)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert set(metrics) == set(expected) == {"loss", "grad_norm", "mean_err", "nonfinite_step_fraction"}
    for name in expected:
        np.testing.assert_allclose(metrics[name], expected[name], rtol=1e-5, atol=1e-6)


def test_per_sample_metrics_of_the_host_loop_come_back_in_batch_order():
    params, batch = conv_problem(n=12, seed=1)
    loss_fn = functools.partial(conv_loss, per_sample=True)
    learner = Learner(
        loss_fn, optax.sgd(0.0), jax.tree_util.tree_map(np.copy, params), minibatch_size=4
    )  # lr 0: errors of the start params
    metrics = learner.update(batch)
    assert learner.loop == "host"
    _, aux = loss_fn(params, batch, None)
    np.testing.assert_allclose(metrics["err"], np.asarray(aux["err"]), rtol=1e-5, atol=1e-6)
    assert metrics["err"].shape == (12,)


def test_dense_losses_keep_the_scanned_update():
    params, batch = regression_problem()
    learner = Learner(mse_loss, optax.sgd(0.1), params, num_epochs=2, minibatch_size=4)
    learner.update(batch)
    assert learner.loop == "scan"


def test_a_followed_target_moves_inside_the_update_it_falls_due_in():
    # follow_target(period, tau) moves the target in the update's compiled call, by
    # 1 - (1 - tau)^k after k steps; the reference updates, then moves the target apart.
    def target_loss(params, batch, rng, target):
        return mse_loss(params, batch, rng)

    params, batch = regression_problem(n=8)
    folded, apart = (
        Learner(target_loss, optax.adam(0.1), params, minibatch_size=2, target_network=True) for _ in range(2)
    )
    folded.follow_target(target_update_period=10, tau=0.1)
    moves, targets = [], []
    for _ in range(4):  # 4 steps per update: due after the 3rd (12 steps) and not after the 4th (4 more)
        folded.update(batch)
        apart.update(batch)
        moves.append(folded.target_updates)
        targets.append(np.asarray(folded.get_state().target_params["w"]))
        if apart.version == 12:
            apart.update_target(1 - 0.9**12)
    assert moves == [0, 0, 1, 1]
    # Updates that move nothing leave the target bit for bit (a move by 0), and the update that
    # moves it is the same compiled function: compiled once, not again at the first move.
    np.testing.assert_array_equal(targets[0], np.asarray(params["w"]))
    np.testing.assert_array_equal(targets[1], targets[0])
    np.testing.assert_array_equal(targets[3], targets[2])
    assert folded.loop == "scan" and folded._update._cache_size() == 1
    jax.tree.map(np.testing.assert_allclose, folded.get_state().target_params, apart.get_state().target_params)
    jax.tree.map(np.testing.assert_allclose, folded.get_state().params, apart.get_state().params)
    assert not np.allclose(folded.get_state().target_params["w"], params["w"])  # it moved


def test_minibatches_in_blocks_take_an_equal_part_of_each_devices_rows():
    """8 samples on 2 devices (rows 0-3 and 4-7), minibatches of 4, 3 epochs: every minibatch
    holds 2 of each device's rows, in device order, and every epoch visits each row once."""
    idx = np.asarray(minibatch_indices(jax.random.PRNGKey(0), 8, 3, 4, num_shards=2))
    assert idx.shape == (6, 4)
    assert (idx[:, :2] < 4).all() and (idx[:, 2:] >= 4).all()
    for epoch in idx.reshape(3, 8):
        assert sorted(epoch) == list(range(8))
    assert len({tuple(e) for e in idx.reshape(3, 8)}) > 1  # each epoch its own shuffle
    rows = np.arange(8) * 10.0
    np.testing.assert_array_equal(take_rows(jnp.asarray(rows), jnp.asarray(idx[0]), 2), rows[idx[0]])
    assert shard_blocks(8, 3, 4, 2) == 2
    assert shard_blocks(8, 1, 4, 2) == 1  # one epoch in order: the minibatches follow the batch
    assert shard_blocks(8, 3, 3, 2) == 1  # 2 devices cannot take equal parts of 3
