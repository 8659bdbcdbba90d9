"""Recurrent policies on Ray rollout workers: what a worker sends (each env's state at the
fragment's start and where episodes start) reproduces its actions when the learner replays it,
``compute_actions`` carries the state it returns, and a restarted worker starts its envs'
episodes from the initial state."""

from __future__ import annotations

import functools
import time

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
    """Recurrent PPO on Ray workers of 2 envs whose episodes end after 7 steps (one worker:
    a batch is two of its fragments)."""
    return Algorithm.build(
        "PPO", env=STATELESS_CARTPOLE, mode="ray", use_lstm=True, hidden_sizes=(16,), num_workers=num_workers,
        num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=2 * T * B, minibatch_size=T,
        env_config={"max_steps_in_episode": EPISODE}, seed=0, **settings,
    )  # fmt: skip


def assert_fragments_replay(algo: Algorithm, fragments: list) -> None:
    """Consecutive fragments of the run's one worker (sampled with the learner's weights)
    replay: unrolling the policy over each from its ``policy_state`` (any pytree), reset at
    its ``episode_starts``, gives the sampled log-probabilities and values to 1e-5; the state
    it ends in is the next fragment's start state, from which its last value target
    bootstraps; episodes start inside the fragments."""
    policy, params = algo.policy, algo.learner.get_weights()
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
            want = 1.0 + algo.config.gamma * np.asarray(v)
            np.testing.assert_allclose(previous["value_targets"][-1][on], want[on], atol=1e-4)
            bootstrapped += int(on.sum())
        state, _, _ = unroll(params, data["policy_state"], data["obs"], data["episode_starts"])
        assert data["episode_starts"][1:].sum() >= B  # at least one reset inside per env
        previous = data
    assert bootstrapped > 0


def test_a_ray_workers_fragments_replay_from_their_stored_start_state(ray_local):
    """Three consecutive fragments of one Ray worker replay from their stored start states
    (:func:`assert_fragments_replay`). ``compute_actions`` returns the state its greedy step
    reached and takes it back; the learner's warm-up compiled the update for the sequence
    batch training then gives it."""
    algo = ray_ppo(lstm_size=LSTM)
    try:
        [(_, worker)] = algo.workers.live()
        fragments = [ray.get(worker.sample.remote()) for _ in range(3)]
        assert_fragments_replay(algo, fragments)
        policy, params = algo.policy, algo.learner.get_weights()
        obs = np.asarray(fragments[-1].data["obs"][:2, 0])  # two steps of one episode
        actions, carried = algo.compute_actions(obs[:1])
        again, _ = algo.compute_actions(obs[1:], state=carried)
        want_state, want = policy.greedy_step(params, policy.initial_state(1), jnp.asarray(obs[:1]))
        want_state, want_again = policy.greedy_step(params, want_state, jnp.asarray(obs[1:]))
        assert [actions[0], again[0]] == [int(want[0]), int(want_again[0])]
        assert [s.shape for s in carried] == [(1, LSTM)] * 2
        algo.train()  # on 4 sequences, in minibatches of one
        assert algo.learner._update._cache_size() == 1  # warmed up on the sequence batch training sees
    finally:
        algo.stop()


def test_a_users_gru_on_a_ray_worker_replays_from_its_stored_start_state(ray_local):
    """A recurrent model of the user's own (a GRU, its carry one array, not the LSTM's pair)
    acts on a Ray worker as jaxflow's LSTM does: two fragments replay from their stored states,
    and an iteration trains on its sequences."""
    algo = ray_ppo(model=GRUActorCritic(2, size=GRU))
    try:
        assert isinstance(algo.policy.network, GRUActorCritic)
        [(_, worker)] = algo.workers.live()
        fragments = [ray.get(worker.sample.remote()) for _ in range(2)]
        assert fragments[0].data["policy_state"].shape == (B, GRU)
        assert_fragments_replay(algo, fragments)
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


@pytest.mark.parametrize("algorithm", sorted(LOSS_UNROLLS))
def test_a_users_recurrent_model_trains_a2c_impala_and_appo_from_its_stored_start_state(ray_local, algorithm):
    """A user's GRU (``model=`` with ``use_lstm=True``) trains two iterations of each. Its
    recurrent (hidden to hidden) weights, which only a gradient through the carried state
    reaches, have moved; and a fragment the worker then samples with the learner's weights,
    which starts mid-episode, replays through the loss's own unroll from its stored start state
    to the sampled log-probabilities (1e-5), where an unroll from zeros does not."""
    algo = Algorithm.build(
        algorithm, env=STATELESS_CARTPOLE, mode="ray", model=GRUActorCritic(2, size=GRU), use_lstm=True,
        num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=2 * T * B,
        env_config={"max_steps_in_episode": EPISODE}, seed=0, **SETTINGS[algorithm],
    )  # fmt: skip
    try:
        before = algo.learner.get_weights()["params"]["GRUCell_0"]
        updates = sum(algo.train()["num_updates"] for _ in range(2))
        params = algo.learner.get_weights()
        fragment = sampled_with(algo, params)
    finally:
        algo.stop()
    assert updates >= 2
    for gate in ("hr", "hz", "hn"):
        moved = np.abs(params["params"]["GRUCell_0"][gate]["kernel"] - before[gate]["kernel"]).max()
        assert moved > 1e-4, (gate, moved)
    start = fragment.data["policy_state"]
    assert start.shape == (B, GRU) and np.abs(start).max() > 0 and fragment.data["episode_starts"][1:].any()
    unroll = LOSS_UNROLLS[algorithm]
    logp, sampled = unroll(algo.policy, params, fragment)
    np.testing.assert_allclose(logp, sampled, atol=1e-5)
    from_zeros, _ = unroll(algo.policy, params, fragment._replace(data=dict(fragment.data, policy_state=0 * start)))
    assert np.abs(from_zeros - sampled).max() > 1e-4


def test_impala_trains_a_recurrent_policy_from_ray_workers_fragments(ray_local):
    """IMPALA's path (fragments through the feeding thread to the learner thread, V-trace on
    the unrolled policy) takes a recurrent policy's fragments and trains on them."""
    algo = Algorithm.build(
        "IMPALA", env=STATELESS_CARTPOLE, mode="ray", use_lstm=True, lstm_size=LSTM, hidden_sizes=(16,),
        num_workers=1, num_envs_per_worker=B, rollout_fragment_length=T, train_batch_size=2 * T * B,
        min_env_steps_per_iteration=4 * T * B, env_config={"max_steps_in_episode": EPISODE}, seed=0,
    )  # fmt: skip
    try:
        result = algo.train()
    finally:
        algo.stop()
    learner = result["learner"]
    assert result["num_updates"] >= 1 and np.isfinite([learner["policy_loss"], learner["value_loss"]]).all()
    assert 0.0 < learner["entropy"] <= np.log(2) + 1e-6


def test_a_restarted_worker_starts_new_episodes_from_the_initial_state(ray_local):
    """A worker killed mid-run (``on_worker_failure="restart"``) comes back as a new process
    whose envs start new episodes: its first fragment flags an episode start for every env at
    step 0 and holds the initial (zero) state there, and replays from it
    (:func:`assert_fragments_replay`); the surviving worker's envs went on with their states."""
    algo = ray_ppo(num_workers=2, lstm_size=LSTM, on_worker_failure="restart")
    try:
        algo.train()
        [(_, survivor), (_, killed)] = algo.workers.live()
        ray.kill(killed, no_restart=True)
        result = algo.train()  # meets the dead worker, starts its successor, trains on the survivor's fragments
        deadline = time.monotonic() + REJOIN_TIMEOUT_S
        while len(algo.workers.live()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # live() admits the new worker once it answers, without sampling from it
        [_, (_, restarted)] = algo.workers.live()
        assert restarted is not killed and algo.workers.num_restarts == 1
        assert_fragments_replay(algo, [ray.get(restarted.sample.remote()) for _ in range(2)])
        going_on = ray.get(survivor.sample.remote()).data
        assert np.abs(np.concatenate(jax.tree.leaves(going_on["policy_state"]))).max() > 0
        result = algo.train()
    finally:
        algo.stop()
    assert result["num_worker_restarts"] == 1 and result["num_healthy_workers"] == 2
