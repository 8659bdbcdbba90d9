"""Runs on a local multi-node Ray cluster (``ray_cluster``: a 1-CPU head where the driver
runs, and worker nodes ``a`` and ``b``): rollout workers and replay shards placed from their
resource settings, learning as on one node, and a worker node lost mid-run.

The two learning runs here are the runs of PPO's and Ape-X's tuned CartPole examples
(``examples/tuned/ppo-cartpole.json`` and ``apex-cartpole.json``): spread over the worker
nodes, each must reach what its file states within its budget, as on one node, so they carry
the checks tests/learning/test_learning.py makes of the other CartPole examples and no one-node
run trains the same example again."""

from __future__ import annotations

import itertools

import jax
import pytest
import ray
import tuned_examples as tuned
from chaos_driver import checkpoint_sizes

from jaxflow import (
    ActorPlacementError,
    Algorithm,
    ConfigError,
    Placement,
    ReplayShards,
    WorkerSet,
    WorkerSpec,
    envs,
    get_algorithm,
    make_config,
)
from jaxflow.api.loop import train
from jaxflow.dataflow.stored_rows import StoredRows

PPO_EXAMPLE = "ppo-cartpole"  # 450 within 200k env steps
LAST_BATCH = 4096  # the last PPO iteration may overshoot the budget by one batch

# Ape-X's example: a greedy evaluation of 400 within 500k env steps, 10 episodes every 4
# iterations of 5k env steps (every 20k).
APEX_EXAMPLE = "apex-cartpole"
APEX_EVALUATION_EPISODES = 10
SPREAD = ("--set", "placement_strategy=spread", "--set", 'custom_resources_per_worker={"rollout": 1}')
"""The examples' flags that put one rollout worker on each worker node ({"rollout": 1} keeps
them off the head, which has none; "spread" puts one on each node); they change where the
workers run, not what they sample or how the run learns."""
APEX_FLAGS = (
    *SPREAD,
    "--set",
    'custom_resources_per_replay_shard={"replay": 1}',
    "--set",
    "on_worker_failure=restart",
)
MAX_ITERATIONS = 110  # 500k env steps in iterations of 5k, and some room
PPO = get_algorithm("PPO")
EVALUATION_EPISODES = 2
# Evaluation during training, rarely: to show where its actor runs.
EVALUATION = ("--set", "evaluation_interval=50", "--set", f"evaluation_episodes={EVALUATION_EPISODES}")


WARM_UP_ITERATIONS = 3
"""The run's first iterations, checked as tests/integration/test_algorithm.py checks A2C's:
PPO's example is PPO's defaults, the run that test would make of PPO."""


@pytest.mark.learning
def test_ppo_workers_spread_over_the_worker_nodes_and_learn_as_on_one_node(ray_cluster):
    """PPO's example on the worker nodes reaches what it states, as on one node; its first
    iterations show the learner's warm-up compiled the update training uses (while the
    workers started), and their bookkeeping."""
    algo, stop = tuned.build(PPO_EXAMPLE, *SPREAD, *EVALUATION)
    try:
        warmed_up = algo.learner._update._cache_size()
        nodes = algo.program.node_ids()
        first = [algo.train() for _ in range(WARM_UP_ITERATIONS)]
        compiled = algo.learner._update._cache_size()
        result = train(algo, stop, verbose=False)  # goes on to the example's stop conditions
        evaluation = algo.program.evaluate_async(EVALUATION_EPISODES, seed=1).result()
    finally:
        algo.stop()
    assert warmed_up == 1  # compiled while the workers started
    assert compiled == 1  # ... for exactly the batches training sees
    assert first[-1]["env_steps_trained"] - first[-2]["env_steps_trained"] == 1024  # PPO's train batch
    assert [r["training_iteration"] for r in first] == [1, 2, 3]
    assert first[-1]["num_updates"] == 3 and first[-1]["num_weight_syncs"] == 3
    sampler = first[-1]["sampler"]
    assert 0 < sampler["env_s"] + sampler["policy_s"] <= sampler["sample_s"]
    assert sorted(nodes["workers"].values()) == sorted([ray_cluster.a.node_id, ray_cluster.b.node_id])
    assert nodes["evaluator"] == ray.get_runtime_context().get_node_id() == ray_cluster.head.node_id  # the driver's
    assert evaluation["episodes"] == EVALUATION_EPISODES and evaluation["return_mean"] >= 1.0
    tuned.assert_reaches(PPO_EXAMPLE, result)
    assert result["episode_return_mean"] >= stop["episode_return_mean"], result
    assert result["env_steps_sampled"] <= stop["env_steps_sampled"] + LAST_BATCH
    assert result["env_steps_trained"] == result["env_steps_sampled"]


def test_a_resource_no_node_has_fails_before_any_actor_starts(ray_cluster):
    with pytest.raises(
        ConfigError,
        match=r"rollout workers \(num_workers=2\) need \{'CPU': 1\.0, 'gpu_host': 1\} each, but no live node",
    ):
        Algorithm.build("A2C", env="CartPole-v1", num_workers=2, custom_resources_per_worker={"gpu_host": 1})
    # The head and the worker nodes have 5 CPUs in all, but none has 4.
    with pytest.raises(
        ConfigError, match=r"replay shards \(num_replay_shards=1\) need \{'CPU': 4\} each, but no live node"
    ):
        ReplayShards(1, capacity=64, placement=Placement(num_cpus=4))


INLINED_BYTES = 100 * 1024
"""Ray returns objects up to this size inside its replies (so through the driver); larger
ones stay in the object store of the node that made them."""


def worker_nodes_alive(head: str) -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]


def test_large_fragments_go_from_their_worker_to_the_learner_group_never_through_the_driver(ray_cluster):
    """IMPALA with a worker on one node and two learner processes (``num_learners=2``) on the
    worker nodes: the worker keeps each fragment's learner rows (about 0.8 MB, past Ray's
    inlining) in its node's object store and the driver passes on references, so the rows
    reach the learners' nodes and never the head, where the driver runs."""
    head = ray_cluster.head.node_id
    added = []  # two worker nodes are needed: it runs before the tests that remove one, but may run alone after them
    while len(worker_nodes_alive(head)) < 2:
        added.append(ray_cluster.cluster.add_node(num_cpus=2, resources={"rollout": 2, "replay": 2}))
        ray_cluster.cluster.wait_for_nodes()
    nodes = worker_nodes_alive(head)
    try:
        handed, result, worker_node, learner_nodes, locations = large_fragment_run()
    finally:
        for node in added:
            ray_cluster.cluster.remove_node(node)
    assert result["num_updates"] >= 1 and result["learner"].get("learner_batches_lost", 0.0) == 0.0
    # 2 CPUs each: one on each worker node (the head has 1), beside the worker on one of them.
    assert sorted(learner_nodes) == sorted(nodes)
    assert all(isinstance(batch, StoredRows) for batch in handed) and locations
    for location in locations.values():
        assert location["object_size"] > INLINED_BYTES
        assert worker_node in location["node_ids"] and head not in location["node_ids"]


def large_fragment_run() -> tuple[list, dict, str, list[str], dict]:
    """One IMPALA iteration on test/WideCartPole-v0 with 2 learner processes: the batches the
    learner thread handed the group, the result, the worker's and learners' nodes, and where
    the batches' rows lie."""
    algo = Algorithm.build(
        "IMPALA", env="test/WideCartPole-v0", env_config={"width": 1024}, num_workers=1, num_learners=2,
        num_cpus_per_worker=0, num_cpus_per_learner=2, custom_resources_per_worker={"rollout": 1},
        num_envs_per_worker=4, rollout_fragment_length=50, train_batch_size=400, min_env_steps_per_iteration=800, seed=0,
    )  # fmt: skip
    group, handed = algo.program.learner, []
    update = group.update
    group.update = lambda batch: (handed.append(batch), update(batch))[1]  # what the learner thread hands it
    try:
        result = algo.train()
        worker_node = algo.program.node_ids()["workers"][0]
        learner_nodes = group.node_ids()
        locations = ray.experimental.get_object_locations([ref for batch in handed for ref in batch.refs])
    finally:
        algo.stop()
    return handed, result, worker_node, learner_nodes, locations


@pytest.mark.learning
def test_apex_loses_a_node_and_trains_on_with_its_actors_back_on_the_other(ray_cluster, tmp_path):
    """Ape-X's example with its 2 actors and 2 shards spread over nodes a and b; after a
    checkpoint, node b leaves. Its actor and its shard come back on node a (the shard with the
    checkpoint's contents), every train() call gives the next iteration, and the run reaches
    what the example states: a greedy evaluation of 400 within 500k env steps.

    The example's own checks, on the first result that reaches it (where ``jaxflow train``
    stops): Ape-X's training returns mix its actors' exploration rates (0.4 and 0.4^8 with
    two actors), so the learned policy is judged greedily, as in the paper's evaluation
    (evaluation during training, in an actor of its own). A rate limiter fixes the replay
    ratio at 4, so the result does not hang on how fast the learner thread runs next to the
    actors on this machine. The run is asynchronous, so its step count varies: 41k-200k in
    most one-node runs here, but one fresh-clone CI run had only reached 261 by 300k, hence
    a 500k budget."""
    a, b = ray_cluster.a.node_id, ray_cluster.b.node_id
    algo, stop = tuned.build(APEX_EXAMPLE, *APEX_FLAGS)
    target, budget = stop["evaluation/episode_return_mean"], stop["env_steps_sampled"]
    try:
        nodes = algo.program.node_ids()
        workers, shards = nodes["workers"], nodes["replay"]
        results = [algo.train() for _ in range(2)]
        checkpoint = algo.save(str(tmp_path))
        saved = checkpoint_sizes(checkpoint, len(shards))
        ray_cluster.cluster.remove_node(ray_cluster.b)
        lost_workers = [i for i, node in workers.items() if node == b]
        lost_shards = [i for i, node in enumerate(shards) if node == b]
        for _ in range(MAX_ITERATIONS):
            results.append(algo.train())
            back = results[-1]["num_worker_restarts"] == len(lost_workers) and algo.replay.num_restarts == len(
                lost_shards
            )
            if (back and greedy(results[-1]) >= target) or results[-1]["env_steps_sampled"] > budget:
                break
        after = algo.program.node_ids()
        stats = algo.replay.stats()
    finally:
        algo.stop()
    # Before: one actor and one shard on each worker node ("spread"), none on the head.
    assert sorted(workers.values()) == sorted(shards) == sorted([a, b])
    # After: the lost ones are back, on the node that is left, the shard from the checkpoint.
    assert lost_workers and lost_shards
    assert after["workers"] == {i: a for i in workers} and after["replay"] == [a] * len(shards)
    assert results[-1]["num_worker_restarts"] == len(lost_workers) and results[-1]["num_healthy_workers"] == 2
    assert algo.replay.num_restarts == len(lost_shards)
    assert algo.replay.restored_sizes == {i: saved[i] for i in lost_shards} and sum(saved) > 0
    assert algo.replay.restored_checkpoints == {i: checkpoint for i in lost_shards}
    # No iteration lost: each train() gave the next one, with more env steps sampled and trained.
    assert [r["training_iteration"] for r in results] == list(range(1, len(results) + 1))
    assert all(y["env_steps_sampled"] > x["env_steps_sampled"] for x, y in itertools.pairwise(results))
    assert all(y["env_steps_trained"] >= x["env_steps_trained"] for x, y in itertools.pairwise(results))
    first = next((r for r in results if greedy(r) >= target), results[-1])
    assert greedy(first) >= target and first["env_steps_sampled"] <= budget, first
    tuned.assert_reaches(APEX_EXAMPLE, first)
    evaluation = first["evaluation"]
    assert evaluation["episodes"] == APEX_EVALUATION_EPISODES
    assert evaluation["training_iteration"] <= first["training_iteration"]
    assert evaluation["env_steps_sampled"] <= first["env_steps_sampled"]  # its policy is that of an earlier iteration
    assert (
        first["episode_return_mean"] < evaluation["episode_return_mean"]
    )  # the actors explore; the greedy policy does not
    assert len(stats) == 2 and all(s["size"] > 0 for s in stats)
    assert first["num_weight_syncs"] > 0 and first["learner"]["mean_abs_td_error"] > 0


def greedy(result: dict) -> float:
    """The result's greedy evaluation return (none yet: -inf)."""
    return result.get("evaluation", {}).get("episode_return_mean", float("-inf"))


def test_a_worker_and_a_shard_whose_only_node_left_are_named_after_the_placement_timeout(ray_cluster, tmp_path):
    """Runs after the Ape-X test, on node a, the last worker node: a new node would cost seconds."""
    half_of_a = {"node_a": 0.5}  # node a has 1: room for both
    config = make_config(
        PPO.config_cls,
        env="CartPole-v1",
        num_workers=1,
        custom_resources_per_worker=half_of_a,
        on_worker_failure="restart",
        placement_timeout_s=1.0,
    )
    env = envs.make_cpu(config.env)
    policy = PPO.policy(config, env.observation_space, env.action_space)
    workers = WorkerSet(WorkerSpec(config, policy), policy.init(jax.random.PRNGKey(0)))
    shards = ReplayShards(
        1, capacity=64, on_failure="restart", placement=Placement(resources=half_of_a), placement_timeout_s=1.0
    )
    try:
        assert workers.node_ids() == {0: ray_cluster.a.node_id} and shards.node_ids() == [ray_cluster.a.node_id]
        ray_cluster.cluster.remove_node(ray_cluster.a)
        # The save meets the dead shard and restarts it; no live node has node_a any more.
        with pytest.raises(
            ActorPlacementError, match=r"replay shard 0 cannot be placed: no live node .*'node_a': 0\.5"
        ):
            shards.save(str(tmp_path))
        workers.on_failure(0, RuntimeError("its node left"))  # as the plan does when a request fails
        with pytest.raises(
            ActorPlacementError, match=r"rollout worker 0 cannot be placed: no live node .*'node_a': 0\.5"
        ):
            workers.live()
    finally:
        workers.stop()
        shards.stop()
