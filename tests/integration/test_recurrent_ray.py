"""Recurrent policies on Ray rollout workers: what a worker sends (each env's state at the
fragment's start and where episodes start) reproduces its actions when the learner replays it,
``compute_actions`` carries the state it returns, and a restarted worker starts its envs'
episodes from the initial state.

Each Ray run here starts a learner and worker processes (tens of seconds on a loaded 2-core
machine), so tests that check different things of the same run share it through a module
fixture that makes the run once and records what the tests assert on."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import ray
from user_models import GRUActorCritic

from jaxflow import Algorithm
from jaxflow.algorithms import impala
from jaxflow.envs import STATELESS_CARTPOLE
from jaxflow.policies.sequences import policy_outputs

T, B, LSTM, GRU = 16, 2, 8, 6
EPISODE = 7
"""Steps before the time limit: two or three episodes start inside each 16-step fragment."""


REJOIN_TIMEOUT_S = 120.0
"""How long a restarted worker (a new process importing JAX) may take to start on a loaded machine."""


def ray_ppo(num_workers: int = 1, **settings) -> Algorithm:
    """Recurrent PPO on Ray workers of 2 envs whose episodes end after 7 steps (a batch is two
    fragments: two of one worker's, or one of each of two workers')."""
    return Algorithm.build(
        "PPO", env=STATELESS_CARTPOLE, mode="ray", use_lstm=True, hidden_sizes=(16,), num_workers=num_workers,
        num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=2 * T * B, minibatch_size=T,
        env_config={"max_steps_in_episode": EPISODE}, seed=0, **settings,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Sampled:
    """Consecutive fragments of one worker, sampled with ``params`` (host copies, taken while
    no update ran: a later update may donate the learner's buffers) of ``policy``."""

    policy: Any
    params: Any
    gamma: float
    fragments: list


def sample(algo: Algorithm, worker: Any, count: int) -> Sampled:
    """``count`` consecutive fragments of the Ray ``worker``, with the learner's weights they were sampled with."""
    fragments = [ray.get(worker.sample.remote()) for _ in range(count)]
    params = jax.device_get(algo.learner.get_weights())
    return Sampled(algo.policy, params, algo.config.gamma, fragments)


def assert_fragments_replay(sampled: Sampled) -> None:
    """Consecutive fragments of a worker (sampled with the learner's weights) replay:
    unrolling the policy over each from its ``policy_state`` (any pytree), reset at its
    ``episode_starts``, gives the sampled log-probabilities and values to 1e-5; the state it
    ends in is the next fragment's start state, from which its last value target bootstraps;
    episodes start inside the fragments."""
    policy, params, fragments = sampled.policy, sampled.params, sampled.fragments
    outputs, unroll = jax.jit(functools.partial(policy_outputs, policy)), jax.jit(policy.unroll)  # once per shape
    first = fragments[0].data
    initial = jax.tree.leaves(policy.initial_state(B))
    for s, want in zip(jax.tree.leaves(first["policy_state"]), initial, strict=True):
        np.testing.assert_array_equal(s, want)
    assert first["episode_starts"][0].all()
    state, previous, bootstrapped = first["policy_state"], None, 0
    for fragment in fragments:
        data = fragment.data
        for s, want in zip(jax.tree.leaves(data["policy_state"]), jax.tree.leaves(state), strict=True):
            np.testing.assert_allclose(s, want, atol=1e-5)  # carried across fragments
        inputs, values, flat = outputs(params, fragment.train_arrays())
        np.testing.assert_allclose(policy.distribution.log_prob(inputs, flat["actions"]), flat["logp"], atol=1e-5)
        np.testing.assert_allclose(values, flat["values"], atol=1e-5)
        if previous is not None:  # its last value bootstrapped from the state its episodes reached
            on = ~data["episode_starts"][0]  # episodes going on into this fragment
            v = policy.value_after(params, state, jnp.asarray(data["obs"][0]))
            # GAE's last target: reward 1 (CartPole) + gamma * the bootstrap value.
            want = 1.0 + sampled.gamma * np.asarray(v)
            np.testing.assert_allclose(previous["value_targets"][-1][on], want[on], atol=1e-4)
            bootstrapped += int(on.sum())
        state, _, _ = unroll(params, data["policy_state"], data["obs"], data["episode_starts"])
        assert data["episode_starts"][1:].sum() >= B  # at least one reset inside per env
        previous = data
    assert bootstrapped > 0


@dataclasses.dataclass(frozen=True)
class Restarted:
    """What the shared PPO run recorded of its killed worker's successor and of the survivor."""

    is_new: bool  # the successor is another actor than the killed one
    num_restarts: int  # the worker set's count once the successor answered
    sampled: Sampled  # the successor's first two fragments
    going_on: dict  # a fragment of the survivor sampled after that
    result: dict  # the iteration after the successor joined


@dataclasses.dataclass(frozen=True)
class LstmRun:
    """What the shared PPO run recorded before its first update, and of its restart."""

    fresh: Sampled  # the first worker's first three fragments, before any training
    obs: np.ndarray  # two steps of one episode of those fragments, to act on
    actions: np.ndarray  # compute_actions on the first step from no state
    carried: Any  # the state it returned
    again: np.ndarray  # compute_actions on the second step from that state
    cache_size: int  # the learner's compiled updates after the first iteration
    restarted: Restarted


def kill_and_restart(algo: Algorithm) -> Restarted:
    """Kills the second of the run's two (trained) workers mid-run; an iteration meets the dead
    worker, starts its successor and trains on the survivor's fragments; once the successor
    answers, two of its fragments, one of the survivor's, and one more iteration."""
    [(_, survivor), (_, killed)] = algo.workers.live()
    ray.kill(killed, no_restart=True)
    algo.train()
    deadline = time.monotonic() + REJOIN_TIMEOUT_S
    while len(algo.workers.live()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # live() admits the new worker once it answers, without sampling from it
    [_, (_, restarted)] = algo.workers.live()
    is_new, num_restarts = restarted is not killed, algo.workers.num_restarts
    sampled = sample(algo, restarted, 2)
    going_on = ray.get(survivor.sample.remote()).data
    return Restarted(is_new, num_restarts, sampled, going_on, algo.train())


@pytest.fixture(scope="module")
def lstm_run(ray_local) -> LstmRun:
    """One recurrent PPO run (jaxflow's LSTM) on two Ray workers, restarted on failure, shared by
    ``test_a_ray_workers_fragments_replay_from_their_stored_start_state`` (the run's start:
    three fragments of its first worker, two ``compute_actions`` calls, one iteration) and
    ``test_a_restarted_worker_starts_new_episodes_from_the_initial_state`` (then
    :func:`kill_and_restart`). The start looks at one worker only, so the second one, which
    the restart needs, changes nothing it checks; a batch is 4 sequences of 16 steps either way."""
    algo = ray_ppo(num_workers=2, lstm_size=LSTM, on_worker_failure="restart")
    try:
        [(_, first), _] = algo.workers.live()
        fresh = sample(algo, first, 3)
        obs = np.asarray(fresh.fragments[-1].data["obs"][:2, 0])
        actions, carried = algo.compute_actions(obs[:1])
        again, _ = algo.compute_actions(obs[1:], state=carried)
        algo.train()  # on 4 sequences, in minibatches of one
        cache_size = algo.learner._update._cache_size()
        restarted = kill_and_restart(algo)
    finally:
        algo.stop()
    return LstmRun(fresh, obs, actions, carried, again, cache_size, restarted)


def test_a_ray_workers_fragments_replay_from_their_stored_start_state(lstm_run: LstmRun):
    """Three consecutive fragments of one Ray worker replay from their stored start states
    (:func:`assert_fragments_replay`). ``compute_actions`` returns the state its greedy step
    reached and takes it back; the learner's warm-up compiled the update for the sequence
    batch training then gives it."""
    assert_fragments_replay(lstm_run.fresh)
    policy, params, obs = lstm_run.fresh.policy, lstm_run.fresh.params, lstm_run.obs
    want_state, want = policy.greedy_step(params, policy.initial_state(1), jnp.asarray(obs[:1]))
    want_state, want_again = policy.greedy_step(params, want_state, jnp.asarray(obs[1:]))
    assert [lstm_run.actions[0], lstm_run.again[0]] == [int(want[0]), int(want_again[0])]
    assert [s.shape for s in lstm_run.carried] == [(1, LSTM)] * 2
    assert lstm_run.cache_size == 1  # warmed up on the sequence batch training sees


def test_a_restarted_worker_starts_new_episodes_from_the_initial_state(lstm_run: LstmRun):
    """A worker killed mid-run (``on_worker_failure="restart"``) comes back as a new process
    whose envs start new episodes: its first fragment flags an episode start for every env at
    step 0 and holds the initial (zero) state there, and replays from it
    (:func:`assert_fragments_replay`); the surviving worker's envs went on with their states."""
    restarted = lstm_run.restarted
    assert restarted.is_new and restarted.num_restarts == 1
    assert_fragments_replay(restarted.sampled)
    assert np.abs(np.concatenate(jax.tree.leaves(restarted.going_on["policy_state"]))).max() > 0
    assert restarted.result["num_worker_restarts"] == 1 and restarted.result["num_healthy_workers"] == 2


def test_a_users_gru_on_a_ray_worker_replays_from_its_stored_start_state(ray_local):
    """A recurrent model of the user's own (a GRU, its carry one array, not the LSTM's pair)
    acts on a Ray worker as jaxflow's LSTM does: two fragments replay from their stored states,
    and an iteration trains on its sequences."""
    algo = ray_ppo(model=GRUActorCritic(2, size=GRU))
    try:
        assert isinstance(algo.policy.network, GRUActorCritic)
        [(_, worker)] = algo.workers.live()
        sampled = sample(algo, worker, 2)
        assert sampled.fragments[0].data["policy_state"].shape == (B, GRU)
        assert_fragments_replay(sampled)
        result = algo.train()
    finally:
        algo.stop()
    assert result["env_steps_trained"] > 0 and np.isfinite(result["learner"]["loss"])


def a2c_unroll(policy, params, fragment) -> tuple[np.ndarray, np.ndarray]:
    """A2C's loss path: ``policy_outputs`` over the fragment's flat rows; ``(logp, sampled logp)``, flat."""
    inputs, _, flat = policy_outputs(policy, params, fragment.train_arrays())
    return np.asarray(policy.distribution.log_prob(inputs, flat["actions"])), np.asarray(flat["logp"])


def vtrace_unroll(policy, params, fragment) -> tuple[np.ndarray, np.ndarray]:
    """IMPALA's and APPO's loss path: ``evaluate_sequences`` over the learner's batch-major rows; time-major."""
    rows = impala.sequence_rows(fragment)
    logp, _, _ = impala.evaluate_sequences(params, rows, policy)
    return np.asarray(logp), np.swapaxes(rows["logp"], 0, 1)


LOSS_UNROLLS = {"A2C": a2c_unroll, "IMPALA": vtrace_unroll, "APPO": vtrace_unroll}
VTRACE_ITERATION = {"num_workers": 1, "min_env_steps_per_iteration": 4 * T * B}
"""IMPALA's and APPO's iterations: a Ray worker (their only kind), 4 fragments (their learner
thread updates on some; APPO's default iteration is 10000 steps)."""
SETTINGS = {
    "A2C": {"num_workers": 0},
    "IMPALA": VTRACE_ITERATION,
    "APPO": {**VTRACE_ITERATION, "minibatch_sequences": 2},
}
"""A2C's worker in the driver (no worker process to start; the same fragments and loss); APPO's
minibatches of 2 of the 4 sequences a train batch holds."""
GRU_ITERATIONS = 2
"""Iterations of each GRU run: at least two updates, which move the recurrent weights."""


MARKED_VERSION = 10**6
"""The weights version the test's own weights carry, told apart from the plan's."""


def sampled_with(algo: Algorithm, params, attempts: int = 10):
    """A fragment the run's one worker samples with ``params`` that starts mid-episode in some
    env (one whose envs all start new episodes at its first step replays alike from any start
    state). IMPALA's and APPO's plans go on broadcasting their learner thread's weights between
    iterations, so one may arrive between the test's weights and its sample: the fragment's
    ``weights_version`` says which acted."""
    local = algo.workers.local_worker
    remote = None if local is not None else algo.workers.live()[0][1]
    for _ in range(attempts):
        if local is not None:  # in the driver, which runs no plan between iterations
            local.set_weights(params, MARKED_VERSION)
            fragment = local.sample()
        else:
            ray.get(remote.set_weights.remote(params, MARKED_VERSION))
            fragment = ray.get(remote.sample.remote())
        if fragment.weights_version == MARKED_VERSION and not fragment.data["episode_starts"][0].all():
            return fragment
    raise AssertionError(f"no fragment sampled mid-episode with the test's weights in {attempts} attempts")


@dataclasses.dataclass(frozen=True)
class GruRun:
    """What :func:`train_gru` recorded of one algorithm's run."""

    policy: Any
    before: Any  # the GRU cell's parameters before training
    params: Any  # the learner's weights after training
    results: list[dict]  # one per iteration
    fragment: Any  # sampled mid-episode with ``params`` after training (:func:`sampled_with`)


def train_gru(algorithm: str) -> GruRun:
    """``algorithm`` with a user's GRU (``model=`` with ``use_lstm=True``) on :data:`SETTINGS`'
    workers, trained :data:`GRU_ITERATIONS` iterations; then a fragment sampled with its weights."""
    algo = Algorithm.build(
        algorithm, env=STATELESS_CARTPOLE, mode="ray", model=GRUActorCritic(2, size=GRU), use_lstm=True,
        num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=2 * T * B,
        env_config={"max_steps_in_episode": EPISODE}, seed=0, **SETTINGS[algorithm],
    )  # fmt: skip
    try:
        before = jax.device_get(algo.learner.get_weights()["params"]["GRUCell_0"])
        results = [algo.train() for _ in range(GRU_ITERATIONS)]
        params = algo.learner.get_weights()
        fragment = sampled_with(algo, params)
    finally:
        algo.stop()
    return GruRun(algo.policy, before, jax.device_get(params), results, fragment)


@pytest.fixture(scope="module")
def gru_runs(ray_local) -> Callable[[str], GruRun]:
    """Each algorithm's :func:`train_gru` run, made on its first use and kept for the module:
    IMPALA's is shared by the ``[IMPALA]`` case of
    ``test_a_users_recurrent_model_trains_a2c_impala_and_appo_from_its_stored_start_state`` and
    ``test_impala_trains_a_recurrent_policy_from_ray_workers_fragments``."""
    runs: dict[str, GruRun] = {}

    def run(algorithm: str) -> GruRun:
        if algorithm not in runs:
            runs[algorithm] = train_gru(algorithm)
        return runs[algorithm]

    return run


@pytest.mark.parametrize("algorithm", sorted(LOSS_UNROLLS))
def test_a_users_recurrent_model_trains_a2c_impala_and_appo_from_its_stored_start_state(gru_runs, algorithm):
    """A user's GRU (``model=`` with ``use_lstm=True``) trains two iterations of each. Its
    recurrent (hidden to hidden) weights, which only a gradient through the carried state
    reaches, have moved; and a fragment the worker then samples with the learner's weights,
    which starts mid-episode, replays through the loss's own unroll from its stored start state
    to the sampled log-probabilities (1e-5), where an unroll from zeros does not."""
    run = gru_runs(algorithm)
    assert sum(result["num_updates"] for result in run.results) >= 2
    for gate in ("hr", "hz", "hn"):
        moved = np.abs(run.params["params"]["GRUCell_0"][gate]["kernel"] - run.before[gate]["kernel"]).max()
        assert moved > 1e-4, (gate, moved)
    fragment = run.fragment
    start = fragment.data["policy_state"]
    assert start.shape == (B, GRU) and np.abs(start).max() > 0 and fragment.data["episode_starts"][1:].any()
    unroll = LOSS_UNROLLS[algorithm]
    logp, sampled = unroll(run.policy, run.params, fragment)
    np.testing.assert_allclose(logp, sampled, atol=1e-5)
    from_zeros, _ = unroll(run.policy, run.params, fragment._replace(data=dict(fragment.data, policy_state=0 * start)))
    assert np.abs(from_zeros - sampled).max() > 1e-4


def test_impala_trains_a_recurrent_policy_from_ray_workers_fragments(gru_runs):
    """IMPALA's path (fragments through the feeding thread to the learner thread, V-trace on
    the unrolled policy) takes a recurrent policy's fragments and trains on them: its first
    iteration's updates, finite losses and an entropy of 2 actions. The run is the user's GRU
    one above, not one of its own of jaxflow's LSTM: the workers, the feeding and the learner
    thread are the same code for any recurrent policy; the LSTM's carry (a pair) crossing from
    a Ray worker is ``test_a_ray_workers_fragments_replay_from_their_stored_start_state``'s,
    and IMPALA's loss unrolling it ``tests/unit/test_recurrent.py``'s."""
    result = gru_runs("IMPALA").results[0]
    learner = result["learner"]
    assert result["num_updates"] >= 1 and np.isfinite([learner["policy_loss"], learner["value_loss"]]).all()
    assert 0.0 < learner["entropy"] <= np.log(2) + 1e-6
