"""A learner group (``num_learners=2``): two learner processes forming one JAX runtime over
gloo update exactly as one learner does on the same global batch (split by the driver, or
fetched by each process from where the workers stored it); a PPO run with them trains,
checkpoints and restores, and IMPALA's learns from fragments its workers stored for the group."""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Iterator

import jax
import numpy as np
import pytest
import ray

import jaxflow.learn.group
from jaxflow import Algorithm
from jaxflow.api.loop import train
from jaxflow.api.program import resolve_mode
from jaxflow.api.ray_program import learner_factory
from jaxflow.api.registry import get_algorithm
from jaxflow.config import make_config
from jaxflow.config.fields import ConfigError
from jaxflow.dataflow.jax_process import start_jax_processes
from jaxflow.dataflow.placement import Placement
from jaxflow.dataflow.stored_rows import BATCHES_LOST, StoredRows, StoreRows
from jaxflow.learn.group import LearnerGroup
from jaxflow.ops.replay_ops import ParallelReplay
from jaxflow.ops.rollout_ops import standardize_fields
from jaxflow.replay.shards import ReplayShards
from jaxflow.rollout.batch import SampleBatch

# Float32 sums over a minibatch split across two processes (gradients all-reduced) in
# another order than one process's: equal to a few ulps of the parameters' scale.
TOLERANCE = 1e-5

PPO_BATCH = 1024  # PPO's train batch with num_workers=0
PPO_UPDATES = 32  # a group update per iteration: 8 epochs x 4 minibatches of PPO_BATCH samples
PPO_ITERATIONS = 1
"""Iterations of the two-learner PPO run before its checkpoint: one group update is what its
counts check (the restored run's iteration is a second, from the restored state); a second
iteration before the save would only sample 1024 more steps and repeat the update."""

TWO_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
"""Each learner process with 2 CPU devices, as on a host with 2 accelerators."""


def random_ppo_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A CartPole PPO train batch of ``n`` samples with random (valid) contents."""
    logits = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, n).astype(np.int32)
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": actions,
        "logp": (logits[np.arange(n), actions] - np.log(np.exp(logits).sum(-1))).astype(np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "value_targets": rng.normal(size=n).astype(np.float32),
        "values": rng.normal(size=n).astype(np.float32),
    }


@ray.remote(num_cpus=0)
class RowsHolder:
    """A stand-in for rollout workers: stores rows in its own name, as ``StoreRows`` does."""

    def store(self, rows: dict[str, np.ndarray]) -> list[ray.ObjectRef]:
        return [StoreRows(operator.attrgetter("data"))(SampleBatch(rows, 0, np.zeros(0), np.zeros(0), 0)).data.refs[0]]


def stored_update_equals_single(group: LearnerGroup, single, rng: np.random.Generator) -> None:
    """Rows stored by a live actor in fragments of 100, 60 and 96 (the processes' blocks of
    128 cross fragment boundaries): the group fetches them and standardizes the advantages
    over all 256 (global mean and std), as one learner given the joined batch does. (256
    rows, as the other updates: nothing compiles again.)"""
    holder = RowsHolder.remote()
    sizes = (100, 60, 96)
    fragments = [random_ppo_batch(n, rng) for n in sizes]
    refs = [ray.get(holder.store.remote(f))[0] for f in fragments]
    stored = StoredRows(tuple(refs), sizes, sum(sizes), standardize=("advantages",))
    joined = {k: np.concatenate([f[k] for f in fragments]) for k in fragments[0]}
    version = single.version
    expected, got = single.update(standardize_fields(joined, ["advantages"])), group.update(stored)
    assert group.version == single.version > version
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert got[key] == pytest.approx(expected[key], abs=TOLERANCE), key
    # The holder dies before the learners fetch (a worker lost after sampling): the batch is
    # skipped by every process alike, and the next one trains. (Rows this large stay in the
    # object store; Ray inlines small ones into the reply, as it did above.)
    large = dict(fragments[2], padding=np.zeros((sizes[2], 1024), np.float32))
    lost = StoredRows((ray.get(holder.store.remote(large))[0],), sizes[2:], sizes[2])
    ray.kill(holder)
    wait_until_lost(lost.refs[0])
    assert group.update(lost) == {BATCHES_LOST: 1.0}
    assert group.version == single.version


def wait_until_lost(ref: ray.ObjectRef, timeout_s: float = 30.0) -> None:
    """Until Ray reports the object's owner dead (until then a fetch may still find it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(ref, timeout=1)
        except ray.exceptions.OwnerDiedError:
            return
        except ray.exceptions.GetTimeoutError:  # still being fetched: ask again
            pass
        time.sleep(0.1)
    raise TimeoutError("the object outlived its owner")


def nonfinite_part_skips_every_step(group: LearnerGroup, single, rng: np.random.Generator) -> None:
    """NaN observations in one device's rows (process 1's second device), a part of every
    minibatch: every step is counted non-finite and leaves the parameters and the Adam state
    as they were, in both processes, as in one learner given the same batch."""
    batch = random_ppo_batch(256, rng)
    batch["obs"][192:] = np.nan
    before = ray.get([p.call.remote("get_state") for p in group.processes])
    expected, got = single.update(batch), group.update(batch)
    assert got["nonfinite_step_fraction"] == expected["nonfinite_step_fraction"] == 1.0
    assert group.version == single.version
    after = ray.get([p.call.remote("get_state") for p in group.processes])
    leaves = jax.tree_util.tree_leaves
    for old, new in zip(before, after):
        for want, have in zip(leaves((old.params, old.opt_state)), leaves((new.params, new.opt_state))):
            np.testing.assert_array_equal(have, want)


def test_group_update_equals_single_process_update(ray_local):
    spec = get_algorithm("PPO")
    config = make_config(spec.config_cls, train_batch_size=256, minibatch_size=64, num_epochs=2, vf_clip=10.0)
    _, make_learner = learner_factory(config, spec)
    # Minibatches shuffled within each of the 4 devices' rows (sgd.shard_blocks), each step's
    # gradients all-reduced as one flat array (learn/reduce.py, how blocks reduce on CPUs of
    # several processes): rows never cross processes, gradients do; one learner shuffles alike.
    make_learner = functools.partial(make_learner, shuffle_devices=4, on_nonfinite="skip")
    single = make_learner()
    group = LearnerGroup(make_learner, 2, Placement(num_cpus=0.5), env_vars=TWO_CPU_DEVICES)
    try:
        assert group.local_devices == [2, 2]  # each process's rows sharded over its own 2 devices
        rng = np.random.default_rng(0)
        for updates in (1, 2):  # the second update starts from the first's state in both
            batch = random_ppo_batch(256, rng)
            expected, got = single.update(batch), group.update(batch)
            assert group.version == single.version == updates * 2 * 256 // 64  # epochs x minibatches
            for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
                assert got[key] == pytest.approx(expected[key], abs=TOLERANCE), key
        nonfinite_part_skips_every_step(group, single, rng)
        stored_update_equals_single(group, single, rng)
        leaves = zip(jax.tree_util.tree_leaves(single.get_weights()), jax.tree_util.tree_leaves(group.get_weights()))
        for want, have in leaves:
            np.testing.assert_allclose(have, want, atol=TOLERANCE)
        assert len(set(group.node_ids())) == 1  # one node here; each learner its own process
    finally:
        group.stop()


def test_a_ppo_run_with_two_learners_trains_checkpoints_and_restores(ray_local, tmp_path):
    """PPO's defaults (sampling in the driver) with its batch trained by two learner processes:
    each iteration is one group update of 8 epochs x 4 minibatches; the checkpoint restores into
    a new group with the same weights, which trains on. That the group learns as one learner
    does follows from the equality above and PPO's learning tests on one learner (a run of this
    config to 450 reached it at 73k-93k env steps for seeds 0-2, as one learner does)."""
    algo = Algorithm.build("PPO", num_workers=0, num_learners=2, seed=0)
    try:
        assert len(algo.program.learner.node_ids()) == 2
        result = train(algo, {"training_iteration": PPO_ITERATIONS}, verbose=False)
        path = algo.save(str(tmp_path))
        saved = algo.program.learner.get_weights()
    finally:
        algo.stop()
    assert result["env_steps_sampled"] == result["env_steps_trained"] == PPO_ITERATIONS * PPO_BATCH, result
    assert algo.program.learner.version == PPO_ITERATIONS * PPO_UPDATES
    restored = Algorithm.restore(path)
    try:
        for want, have in zip(
            jax.tree_util.tree_leaves(saved), jax.tree_util.tree_leaves(restored.program.learner.get_weights())
        ):
            np.testing.assert_array_equal(have, want)
        version = restored.program.learner.version
        restored.train()
        assert restored.program.learner.version == version + PPO_UPDATES
    finally:
        restored.stop()


@pytest.mark.learning
def test_impala_with_two_learners_fed_straight_from_the_workers_learns_cartpole(ray_local):
    """IMPALA with 2 rollout workers whose fragments go to the 2 learner processes through the
    object store (``StoreRows``; no fragment passes through the driver): the return of a random
    policy (about 22) rises past 60 within 40k env steps, every sampled batch trained."""
    algo = Algorithm.build(
        "IMPALA", num_workers=2, num_learners=2, num_cpus_per_worker=0.5, num_cpus_per_learner=0.5, seed=0
    )
    try:
        result = train(algo, {"episode_return_mean": 60.0, "env_steps_sampled": 40_000}, verbose=False)
    finally:
        algo.stop()
    assert result["episode_return_mean"] >= 60.0, result
    assert result.get(BATCHES_LOST, 0) == 0
    assert result["env_steps_trained"] > 0.8 * result["env_steps_sampled"]


def random_dqn_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A CartPole DQN train batch of ``n`` replayed transitions with importance weights."""
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, n).astype(np.int32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "discounts": rng.choice([0.0, 0.99**3], n).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, n).astype(np.float32),
    }


def replayed_straight_to_the_group(shards: ReplayShards, group: LearnerGroup, single) -> None:
    """A replay shard actor hands a learner group a reference to a replayed batch (its rows
    and importance weights stay in the shard's object store until the processes fetch them),
    and the update equals one learner's on the same rows."""
    replayed = next(iter(ParallelReplay(shards, 128, beta=0.4, to_learner=group)))
    assert isinstance(replayed.data, StoredRows) and replayed.num_samples == 128
    rows = ray.get(replayed.data.refs[0])
    np.testing.assert_array_equal(rows["weights"], replayed.weights)
    expected, got = single.update(rows), group.update(replayed.train_arrays())
    np.testing.assert_allclose(got["td_error"], expected["td_error"], atol=TOLERANCE)
    assert group.version == single.version


APEX_PLACEMENT = Placement(num_cpus=0.5)
REPLAY_SEED = 2
"""The seed of the replay shard's random transitions (the tests' own batches use 1)."""


@pytest.fixture(scope="module")
def replay_shard(ray_local) -> Iterator[ReplayShards]:
    """One replay shard actor holding 256 random DQN transitions (no rate limiter), started
    once for both of Ape-X's group tests below, as their learner processes are (a shard is a
    process of its own, seconds of importing JAX): each test replays a batch of its own from it
    (:func:`replayed_straight_to_the_group`); no test writes to it, so what one replayed
    changes nothing the other checks."""
    shards = ReplayShards(1, capacity=256, alpha=0.6, seed=0)
    try:
        ray.get(shards.actors[0].add.remote(random_dqn_batch(256, np.random.default_rng(REPLAY_SEED))))
        yield shards
    finally:
        shards.stop()


@pytest.fixture(scope="module")
def apex_learner_processes(ray_local):
    """Two learner processes forming one JAX runtime (one CPU device each), started once for
    both of Ape-X's group tests below (each start is seconds of importing JAX and joining the
    runtime, more on a loaded machine): each test's group hosts new learners of its own in them."""
    processes = start_jax_processes(2, APEX_PLACEMENT.options())
    yield processes
    for process in processes[0]:
        ray.kill(process)


def group_in(processes, make_learner, monkeypatch) -> LearnerGroup:
    """A ``LearnerGroup`` built as any is (its placement checked, a member built from
    ``make_learner`` in each process), in the started ``processes`` rather than new ones; the
    fixture that started them stops them."""
    monkeypatch.setattr(jaxflow.learn.group, "start_jax_processes", lambda *args: processes)
    return LearnerGroup(make_learner, 2, APEX_PLACEMENT)


@pytest.mark.parametrize("shuffle_devices", [None, 2], ids=["whole", "flat"])
def test_group_update_with_a_target_network_equals_single_process_update(
    apex_learner_processes, replay_shard, monkeypatch, shuffle_devices
):
    """Ape-X's learner in a group, fed as ``ToDevice`` feeds it (each process's rows put in the
    object store ahead): per-sample TD errors (the new priorities) in the global batch's order,
    target-network moves and parameters as one process's; with whole minibatches (the default
    on CPUs of several processes) and in blocks, each process's part's gradient all-reduced as
    one flat array (learn/reduce.py)."""
    spec = get_algorithm("APEX")
    config = make_config(spec.config_cls, tau=0.5)
    _, make_learner = learner_factory(config, spec)
    make_learner = functools.partial(make_learner, shuffle_devices=shuffle_devices)
    single = make_learner()
    group = group_in(apex_learner_processes, make_learner, monkeypatch)
    for learner in (single, group):
        learner.follow_target(target_update_period=2, tau=0.5)  # every other update
    rng = np.random.default_rng(1)
    for updates in (1, 2, 3):
        batch = random_dqn_batch(128, rng)
        placed = group.place(batch)
        assert placed.num_samples == 128 and len(placed.parts) == 2
        expected, got = single.update(batch), group.update(placed)
        assert group.version == single.version == updates
        assert group.target_updates == single.target_updates == updates // 2
        np.testing.assert_allclose(got["td_error"], expected["td_error"], atol=TOLERANCE)
        assert got["mean_q"] == pytest.approx(expected["mean_q"], abs=TOLERANCE)
    replayed_straight_to_the_group(replay_shard, group, single)
    want, have = single.get_state(), group.get_state()
    for a, b in zip(jax.tree_util.tree_leaves(want.target_params), jax.tree_util.tree_leaves(have.target_params)):
        np.testing.assert_allclose(b, a, atol=TOLERANCE)
    for a, b in zip(jax.tree_util.tree_leaves(want.params), jax.tree_util.tree_leaves(have.params)):
        np.testing.assert_allclose(b, a, atol=TOLERANCE)


def test_num_learners_is_refused_where_it_cannot_run():
    with pytest.raises(ConfigError, match=r"SACConfig.num_learners=2: this algorithm trains with one learner"):
        make_config(get_algorithm("SAC").config_cls, num_learners=2)
    with pytest.raises(ConfigError, match="num_learners"):
        make_config(get_algorithm("PPO").config_cls, num_learners=0)
    ppo = make_config(get_algorithm("PPO").config_cls, env="gymnax/CartPole-v1", num_learners=2)
    with pytest.raises(ConfigError, match=r"num_learners > 1 is for Ray mode"):
        resolve_mode(ppo, get_algorithm("PPO"))
