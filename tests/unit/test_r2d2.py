"""R2D2's parts against hand computations: value rescaling, the sequence loss with burn-in
(an independent numpy implementation, the network stepped one observation at a time),
the mixed priorities, the sequence replay's ring (on the device and in Ray mode's shards),
and its config's refusals."""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.algorithms import r2d2
from jaxflow.algorithms.r2d2 import R2D2Config
from jaxflow.config import ConfigError, make_config
from jaxflow.rollout.evaluation import Evaluator, evaluate_policy

EPS = 1e-3
L, N, OBS, A = 7, 2, 3, 2
CONFIG = make_config(
    R2D2Config,
    env="jaxflow/StatelessCartPole-v1",
    burn_in=2,
    trace_length=5,
    sequence_period=7,
    rollout_fragment_length=7,
    n_step=2,
    gamma=0.9,
    lstm_size=4,
    hidden_sizes=(8,),
)
POLICY = r2d2.r2d2_policy(CONFIG, gymnasium.spaces.Box(-1.0, 1.0, (OBS,), np.float32), gymnasium.spaces.Discrete(A))


def h(x):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + EPS * x


def h_inv(x):
    return np.sign(x) * (((np.sqrt(1.0 + 4.0 * EPS * (np.abs(x) + 1.0 + EPS)) - 1.0) / (2.0 * EPS)) ** 2 - 1.0)


def test_value_rescaling_is_hand_checked_and_exactly_inverted():
    x = np.array([0.0, 3.0, -8.0, 99.0])  # sqrt(|x| + 1) = 1, 2, 3, 10
    np.testing.assert_allclose(r2d2.rescale(jnp.asarray(x, jnp.float32), EPS), [0.0, 1.003, -2.008, 9.099], rtol=1e-6)
    wide = np.concatenate([-np.logspace(-6, 6, 200), [0.0], np.logspace(-6, 6, 200)])
    with jax.enable_x64(True):
        x64 = jnp.asarray(wide, jnp.float64)
        np.testing.assert_allclose(r2d2.unrescale(r2d2.rescale(x64, EPS), EPS), wide, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(r2d2.rescale(r2d2.unrescale(x64, EPS), EPS), wide, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(r2d2.unrescale(x64, EPS), h_inv(wide), rtol=1e-7)  # the paper's formula


def test_priorities_mix_max_and_mean_abs_td_with_eta():
    td = jnp.array([[1.0, 0.0], [-3.0, 0.5], [2.0, -0.5]])  # [T=3, B=2]
    # sequence 0: max 3, mean 2; sequence 1: max 0.5, mean 1/3
    expected = [0.9 * 3 + 0.1 * 2, 0.9 * 0.5 + 0.1 / 3]
    np.testing.assert_allclose(r2d2.sequence_priorities(td, 0.9), expected, rtol=1e-6)
    np.testing.assert_allclose(r2d2.sequence_priorities(td, 0.0), [2.0, 1 / 3], rtol=1e-6)


def sequences(seed: int = 0) -> dict:
    """Two batch-major sequences of L steps: in sequence 0 an episode ends at step 3 (inside
    the trace) and the next starts at 4; in sequence 1 one starts at step 1 (inside the burn-in).
    Their discounts are what rollouts store (``truncation_bootstrap``): gamma, 0 where an episode ended."""
    rng = np.random.default_rng(seed)
    starts, discounts = np.zeros((N, L), bool), np.full((N, L), CONFIG.gamma, np.float32)  # as rollouts store them
    starts[0, 4], discounts[0, 3] = True, 0.0
    starts[1, 1], discounts[1, 0] = True, 0.0
    state = tuple(jnp.asarray(rng.normal(size=(N, CONFIG.lstm_size)), jnp.float32) for _ in range(2))
    return {
        "obs": jnp.asarray(rng.normal(size=(N, L, OBS)), jnp.float32),
        "actions": jnp.asarray(rng.integers(0, A, (N, L)), jnp.int32),
        "rewards": jnp.asarray(rng.normal(size=(N, L)), jnp.float32),
        "discounts": jnp.asarray(discounts),
        "episode_starts": jnp.asarray(starts),
        "policy_state": state,
        "weights": jnp.asarray([1.0, 0.5], jnp.float32),
    }


def hand_loss(params, target_params, batch) -> tuple[float, np.ndarray]:
    """R2D2's loss in numpy: each network stepped one observation at a time from the stored
    state (zeroed by hand where an episode starts), burn-in steps dropped, the n-step double-Q
    targets summed in loops."""
    apply = jax.jit(POLICY.network.apply)

    def q_values(p):
        q = np.zeros((N, L, A))
        for b in range(N):
            state = tuple(s[b : b + 1] for s in batch["policy_state"])
            for t in range(L):
                if batch["episode_starts"][b, t]:
                    state = tuple(jnp.zeros_like(s) for s in state)
                state, out = apply(p, state, batch["obs"][b, t][None])
                q[b, t] = np.asarray(out[0])
        return q[:, CONFIG.burn_in :]

    q, q_target = q_values(params), q_values(target_params)
    T, n, burn = CONFIG.trace_length, CONFIG.n_step, CONFIG.burn_in
    r = np.asarray(batch["rewards"])[:, burn:]
    d = np.asarray(batch["discounts"])[:, burn:]  # gamma, or 0 where an episode ended: gamma once
    a = np.asarray(batch["actions"])[:, burn:]
    td = np.zeros((T - 1, N))
    for b in range(N):
        for t in range(T - 1):
            g, disc, k = 0.0, 1.0, min(n, T - 1 - t)
            for i in range(k):
                g += disc * r[b, t + i]
                disc *= d[b, t + i]
            a_star = q[b, t + k].argmax()
            target = h(g + disc * h_inv(q_target[b, t + k, a_star]))
            td[t, b] = target - q[b, t, a[b, t]]
    loss = np.mean(np.asarray(batch["weights"]) * np.mean(0.5 * td**2, axis=0))
    priorities = 0.9 * np.abs(td).max(0) + 0.1 * np.abs(td).mean(0)
    return loss, priorities


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_sequence_loss_with_burn_in_and_resets_equals_the_numpy_computation(jit):
    params, target_params = POLICY.init(jax.random.PRNGKey(0)), POLICY.init(jax.random.PRNGKey(1))
    batch = sequences()
    fn = functools.partial(r2d2.loss, policy=POLICY, config=CONFIG)
    # Not jitted, every op outside the unrolls' scans runs as it comes (disable_jit, which runs
    # the scans as Python loops too, costs 1.6 times the CPU time here).
    total, metrics = (jax.jit(fn) if jit else fn)(params, batch, jax.random.PRNGKey(2), target_params)
    expected_loss, expected_priorities = hand_loss(params, target_params, batch)
    np.testing.assert_allclose(float(total), expected_loss, rtol=1e-4)  # float32 against float64
    np.testing.assert_allclose(metrics["td_error"], expected_priorities, rtol=1e-4)


def test_burn_in_steps_carry_no_gradient_and_their_rewards_no_weight():
    params, target_params = POLICY.init(jax.random.PRNGKey(0)), POLICY.init(jax.random.PRNGKey(1))
    batch = sequences(1)

    def of(obs, state, rewards):
        b = dict(batch, obs=obs, policy_state=state, rewards=rewards)
        return r2d2.loss(params, b, jax.random.PRNGKey(2), target_params, policy=POLICY, config=CONFIG)[0]

    grads = jax.jit(jax.grad(of, argnums=(0, 1, 2)))
    g_obs, g_state, g_rewards = grads(batch["obs"], batch["policy_state"], batch["rewards"])
    burn = CONFIG.burn_in
    assert float(jnp.abs(g_obs[:, :burn]).max()) == 0.0 and float(jnp.abs(g_obs[:, burn:]).max()) > 0.0
    assert all(float(jnp.abs(s).max()) == 0.0 for s in g_state)
    assert float(jnp.abs(g_rewards[:, :burn]).max()) == 0.0
    value = jax.jit(of)
    base = float(value(batch["obs"], batch["policy_state"], batch["rewards"]))
    changed_rewards = batch["rewards"].at[:, :burn].add(5.0)
    assert float(value(batch["obs"], batch["policy_state"], changed_rewards)) == base
    # the burn-in still sets the state the trace starts from (sequence 0 has no reset before step 4)
    assert float(value(batch["obs"].at[0, 0].add(3.0), batch["policy_state"], batch["rewards"])) != base


def test_sequence_replay_stores_each_step_once_with_overlapping_sequences_and_their_start_states():
    """Two envs, fragments of P = 2 steps, sequences of L = 4 (k = 2 blocks, overlapping by 2),
    room for 2 sequences per env: 3 blocks (6 steps) per env in the ring. Step t of env b has
    observation 10 t + b and start state 100 t + b; env 1's episode ends at step 2."""
    buffer = r2d2.sequence_buffer(burn_in=1, trace_length=3, sequence_period=2)
    P, B = 2, 2

    def frag(i):
        t = np.arange(i * P, (i + 1) * P)[:, None]
        discounts = np.ones((P, B), np.float32)
        starts = np.zeros((P, B), bool)
        if i == 1:
            discounts[0, 1], starts[1, 1] = 0.0, True  # env 1: step 2 ends an episode, step 3 starts one
        state = np.full((B, 1), 100.0 * i * P) + np.arange(B)[:, None]
        return {
            "obs": jnp.asarray((10 * t + np.arange(B))[..., None], jnp.float32),
            "actions": jnp.asarray(np.broadcast_to(t, (P, B)), jnp.int32),
            "rewards": jnp.ones((P, B)),
            "discounts": jnp.asarray(discounts),
            "episode_starts": jnp.asarray(starts),
            "policy_state": (jnp.asarray(state, jnp.float32),),
        }

    state = buffer.init(jax.eval_shape(lambda: frag(0)), 4)
    assert state.steps["obs"].shape == (6, B, 1) and state.priorities.shape == (3, B)  # each step once
    add, sample, update = (
        jax.jit(buffer.add),
        jax.jit(buffer.sample, static_argnums=2),
        jax.jit(buffer.update_priorities),
    )
    sizes, filled = [], []
    for i in range(4):
        state = add(state, frag(i), 0.9)
        sizes.append(int(state.size))
        filled.append((np.asarray(state.priorities) > 0).all(axis=1).tolist())
    assert sizes == [0, 2, 4, 4]  # complete once two blocks are in; 2 per env once the ring is full
    # Block 3 goes to ring slot 0: the sequence of blocks 2-3 (starting at slot 2) is new, that of blocks 0-1 gone.
    assert filled == [[False] * 3, [True, False, False], [True, True, False], [False, True, True]]

    # The live sequences start at blocks 1 (slot 1: steps 2-5) and 2 (slot 2: steps 4-7, 6-7 in slot 0).
    state = update(state, jnp.array([2, 3, 4, 5]), jnp.array([1.0, 1.0, 1.0, 1.0]), 0.9)
    seqs, slots, weights = sample(state, jax.random.PRNGKey(0), 8, 0.6)
    for s, slot in enumerate(np.asarray(slots)):
        block, env = divmod(int(slot), B)
        first = {1: 2, 2: 4}[block]  # the oldest step of each live sequence
        np.testing.assert_array_equal(seqs["obs"][s, :, 0], 10 * np.arange(first, first + 4) + env)
        assert float(seqs["policy_state"][0][s, 0]) == 100 * first + env
        ends = [t == 2 and env == 1 for t in range(first, first + 4)]
        np.testing.assert_array_equal(seqs["discounts"][s], 1.0 - np.asarray(ends, np.float32))
        np.testing.assert_array_equal(seqs["episode_starts"][s], [t == 3 and env == 1 for t in range(first, first + 4)])
    assert {int(s) // B for s in np.asarray(slots)} == {1, 2} and np.allclose(weights, 1.0)
    # Priority 4 for env 0's sequence at slot 1: weight (4^0.9 / 1)^-0.6 when drawn, max priority 4 for new ones.
    state = update(state, jnp.array([2]), jnp.array([4.0]), 0.9)
    _, slots, weights = sample(state, jax.random.PRNGKey(1), 8, 0.6)
    np.testing.assert_allclose(weights, np.where(np.asarray(slots) == 2, 4.0 ** (-0.9 * 0.6), 1.0), rtol=1e-6)
    assert float(state.max_priority) == 4.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sequence_period": 3}, "sequence_period .3. must divide the sequence length"),
        ({"rollout_fragment_length": 5}, "rollout_fragment_length .5. must equal sequence_period"),
        ({"priority_eta": 1.5}, "priority_eta"),
        ({"trace_length": 6, "n_step": 6}, "n_step .6. must be below trace_length"),
        ({"use_lstm": False}, "R2D2's Q-network is recurrent"),
        ({"mode": "ray", "num_workers": 0}, "R2D2Config.num_workers must be >= 1"),
        (
            {"env": "CartPole-v1", "num_workers": 2, "num_replay_shards": 3},  # mode 'auto': Ray mode
            r"num_replay_shards \(3\) must be at most num_workers",
        ),
        ({"mode": "ray", "replay_batch_size": 48}, r"replay_batch_size \(48\) must be a multiple of train_batch_size"),
    ],
)
def test_config_refuses_bad_settings_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as info:
        make_config(R2D2Config, **overrides)
    assert "\n" not in str(info.value)


def test_checkpoint_restores_the_sequence_replay_and_jaxflow_evaluate_plays_the_recurrent_q_policy(tmp_path, capsys):
    """A saved R2D2 run restores its replay ring, priorities and recurrent states as they were,
    and ``jaxflow evaluate`` plays the loaded policy greedily, its state carried per episode."""
    from jaxflow import Algorithm
    from jaxflow.api.cli import main

    algo = Algorithm.build(
        "R2D2", env="jaxflow/StatelessCartPole-v1", num_envs=4, iterations_per_call=3, lstm_size=8,
        hidden_sizes=(16,), train_batch_size=4, buffer_size=16, learning_starts=4, min_env_steps_per_iteration=0,
    )  # fmt: skip
    result = algo.train()
    assert np.isfinite(result["learner"]["loss"])  # trained on the third fragment: 2 sequences per env by then
    path = algo.save(str(tmp_path))
    restored = Algorithm.restore(path)
    before, after = algo.program.state, restored.program.state
    assert int(after.replay.size[0]) == 8 and float(jnp.abs(after.replay.priorities).max()) > 0
    for a, b in zip(jax.tree.leaves((before.replay, before.envs.policy_state)), jax.tree.leaves((after.replay, after.envs.policy_state)), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert main(["evaluate", "--checkpoint", path, "--episodes", "2"]) == 0
    assert "greedy return over 2 episodes" in capsys.readouterr().out


def actor_fragment(actor: int, i: int, P: int = 2, E: int = 2) -> dict:
    """Fragment ``i`` of ``actor``: step t of env e has observation 1000 actor + 10 t + e, and
    the state at the fragment's first step is 100 t + e (both of its leaves)."""
    t = np.arange(i * P, (i + 1) * P)[:, None]
    state = np.full((E, 1), 100.0 * i * P) + np.arange(E)[:, None]
    return {
        "obs": (1000 * actor + 10 * t + np.arange(E))[..., None].astype(np.float32),
        "actions": np.broadcast_to(t, (P, E)).astype(np.int32),
        "rewards": np.ones((P, E), np.float32),
        "discounts": np.ones((P, E), np.float32),
        "episode_starts": np.zeros((P, E), bool),
        "policy_state": (state.astype(np.float32), state.astype(np.float32)),
    }


def test_ray_shard_keeps_each_actors_sequences_as_the_device_ring_does_and_samples_by_priority():
    """Shard 1 of 2 for 4 actors holds actors 1 and 3 in two lanes (2 envs each, sequences of
    4 steps every 2, room for 8 sequences: 3 blocks per env). Their fragments, interleaved,
    give per lane what the device ring gives that actor alone; sampled sequences are the
    actor's consecutive steps from the state at their first step, drawn over both lanes in
    proportion to their priorities (tolerance 4 binomial standard deviations). Sequences across
    a break in an actor's stream (a restore, a replaced actor) are never sampled."""
    shard = r2d2.SequenceShard(
        8, 1.0, 0, 1, example=actor_fragment(0, 0), num_actors=4, num_shards=2, lengths=(1, 3, 2)
    )
    ring = r2d2.sequence_buffer(burn_in=1, trace_length=3, sequence_period=2)
    alone, add = {a: ring.init(actor_fragment(a, 0), 4) for a in (1, 3)}, jax.jit(ring.add)
    for actor, i in [(1, 0), (3, 0), (1, 1), (1, 2), (3, 1), (1, 3)]:
        assert shard.add(actor_fragment(actor, i), source=(actor, 0)) == 4  # its 2 x 2 steps
        alone[actor] = add(alone[actor], actor_fragment(actor, i), 1.0)
    with pytest.raises(ValueError, match="actor i's fragments go to shard i % 2"):
        shard.add(actor_fragment(2, 0), source=(2, 0))
    saved = shard.get_state()["buffer"]
    for lane, actor in enumerate((1, 3)):
        cols = slice(2 * lane, 2 * lane + 2)
        np.testing.assert_array_equal(saved["priorities"][:, cols], alone[actor].priorities)
        np.testing.assert_array_equal(saved["steps/obs"][:, cols], alone[actor].steps["obs"])
        np.testing.assert_array_equal(saved["start_states/0"][:, cols], alone[actor].start_states[0])
    # Each step once: 3 blocks of 2 steps per env, where the 6 live sequences of 4 steps would take 24.
    assert saved["steps/obs"].shape == (6, 4, 1) and shard.stats()["size"] == 6

    live = np.flatnonzero(saved["priorities"].reshape(-1))  # slot = block * 4 + column
    lane_of = (live % 4) // 2
    shard.update_priorities(live, np.where(lane_of == 1, 4.0, 1.0))  # lane 1: 2 sequences x 4, lane 0: 4 x 1
    drawn = [shard.sample(256, beta=0.5) for _ in range(8)]
    first_fragment = {(1, 1): 1, (1, 2): 2, (3, 0): 0}  # (actor, ring block) of each live sequence
    for batch in drawn:
        block, col = np.divmod(batch.indices, 4)
        actor, env = np.where(col < 2, 1, 3), col % 2
        first = 2 * np.array([first_fragment[a, b] for a, b in zip(actor, block, strict=True)])
        expected = 1000 * actor[:, None] + 10 * (first[:, None] + np.arange(4)) + env[:, None]
        np.testing.assert_array_equal(batch.data["obs"][..., 0], expected)
        np.testing.assert_array_equal(batch.data["policy_state"][1][:, 0], 100 * first + env)
        np.testing.assert_allclose(batch.weights, np.where(col < 2, 1.0, 4.0**-0.5), rtol=1e-6)
    share = np.mean([int(slot) % 4 >= 2 for b in drawn for slot in b.indices])
    assert abs(share - 2 / 3) < 4 * np.sqrt(2 / 3 * 1 / 3 / 2048)

    restored = r2d2.SequenceShard(
        8, 1.0, 0, 1, example=actor_fragment(0, 0), num_actors=4, num_shards=2, lengths=(1, 3, 2)
    )
    assert restored.import_state(shard.export_state()) == 6
    a, b = shard.sample(256, beta=0.5), restored.sample(256, beta=0.5)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data["obs"], b.data["obs"])

    # Actor 1's fragment 4 completes the sequence of fragments 3-4 (ring block 0, columns 0-1):
    # sampled in the shard that saw fragment 3 come, never in the restored one (its actors did
    # not stop at the checkpoint); the next fragment's sequence is whole again. A replaced actor
    # 3 (its envs started afresh) breaks its lane the same way (fragment 2: block 1, columns 2-3).
    def completed(s, actor, i, replaced, block, cols):
        s.add(actor_fragment(actor, i), source=(actor, replaced))
        return s.get_state()["buffer"]["priorities"][block, cols]

    assert (completed(shard, 1, 4, 0, 0, slice(0, 2)) > 0).all()
    assert (completed(restored, 1, 4, 0, 0, slice(0, 2)) == 0).all()
    assert (completed(restored, 1, 5, 0, 1, slice(0, 2)) > 0).all()
    assert (completed(shard, 3, 2, 1, 1, slice(2, 4)) == 0).all()


def test_store_to_replay_by_actor_counts_a_replaced_actor_as_a_break_in_its_lane():
    """``StoreToReplay(by_actor=True)`` names each fragment's actor and how many times its
    handle changed: a new handle (a restarted worker) makes the sequence its next fragment
    completes unsampleable, while the same handle's fragments join into whole sequences."""
    from jaxflow import LocalReplay, StoreToReplay
    from jaxflow.ops.metrics import Context
    from jaxflow.rollout.batch import SampleBatch

    replay = LocalReplay(8)
    replay.shard = r2d2.SequenceShard(
        8, 1.0, example=actor_fragment(0, 0), num_actors=1, num_shards=1, lengths=(1, 3, 2)
    )
    store, ctx = StoreToReplay(replay, by_actor=True), Context()
    completed = []
    for i, handle in enumerate(["worker", "worker", "worker", "restarted worker"]):
        ctx.current_actor = (0, handle)
        store(SampleBatch(actor_fragment(0, i), 4, np.zeros(0), np.zeros(0), 0), ctx)
        blocks, priorities = (replay.shard.get_state()["buffer"][k] for k in ("blocks", "priorities"))
        completed.append(priorities[(int(blocks[0]) - 2) % len(priorities)].tolist())  # the sequence just completed
    assert completed == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]  # fragment 0 completes none
    assert ctx.counters["replay_items_stored"] == 16 and ctx.counters["replay_items_dropped"] == 0


def test_a_resume_that_would_reshape_the_sequence_rings_is_refused_in_one_line(tmp_path):
    """A Ray-mode R2D2 checkpoint (two real sequence shards' files) resumes with another
    learning rate, but not with other actors, envs per actor or sequence lengths, which shape
    the rings: the refusal names them, before anything starts."""
    from jaxflow.api import checkpoint
    from jaxflow.api.restore import plan_restore, state_template
    from jaxflow.config.parsing import to_json_dict
    from jaxflow.replay import saved as saved_replay

    config = make_config(R2D2Config, env="CartPole-v1", mode="ray", num_workers=2, num_replay_shards=2)
    spec = r2d2.R2D2

    def write_replay(path: str) -> dict:
        exports = [
            r2d2.SequenceShard(
                config.replay_shard_capacity,
                example=actor_fragment(0, 0),
                index=i,
                num_actors=2,
                num_shards=2,
                lengths=(1, 3, 2),
            ).export_state()
            for i in range(2)
        ]
        for i, data in enumerate(exports):
            open(f"{path}/replay_shard_{i}.npz", "wb").write(data)
        return {saved_replay.RECORD_KEY: [saved_replay.summary(data) for data in exports]}

    state = jax.device_get(state_template(config, spec).state)
    meta = {"algorithm": "R2D2", "config": to_json_dict(config), "context": {"counters": {"env_steps_sampled": 7}}}
    path = checkpoint.save(str(tmp_path), 1, state, meta, write_replay)
    assert plan_restore(path, {"lr": 5e-4}).config.optimizer.lr == 5e-4
    for overrides, named in [
        ({"num_workers": 3}, "rollout.num_workers=2"),
        ({"num_envs_per_worker": 4}, "rollout.num_envs_per_worker=8"),
        ({"burn_in": 8, "trace_length": 12}, "burn_in=4, trace_length=16"),
    ]:
        with pytest.raises(checkpoint.CheckpointError, match=f"its replay was kept with {named}; a resume must keep"):
            plan_restore(path, overrides)
    with pytest.raises(checkpoint.CheckpointError) as e:
        plan_restore(path, {"num_workers": 3})
    assert "\n" not in str(e.value) and path in str(e.value)


def test_an_evaluator_keeps_its_env_and_compiled_policy_from_call_to_call():
    """The evaluator actor plays every evaluation of a run: it compiles the greedy policy and the
    JAX env's step once (each call compiled both anew: about 0.8 s of CPU an evaluation) and
    scores as a fresh :func:`evaluate_policy` does."""
    from jaxflow.envs.gymnax_cpu import _host_functions

    config = make_config(R2D2Config, mode="ray", num_workers=2, lstm_size=8, hidden_sizes=(8,))
    env = envs.make_cpu(config.env)
    policy = r2d2.r2d2_policy(config, env.observation_space, env.action_space)
    params = policy.init(jax.random.PRNGKey(0))
    evaluator = Evaluator(config, policy)
    first = evaluator.evaluate(params, 3, 7, None)
    compiled = [f._cache_size() for f in (*evaluator._compiled, *_host_functions())]
    second = evaluator.evaluate(params, 3, 70, None)
    assert [f._cache_size() for f in (*evaluator._compiled, *_host_functions())] == compiled
    assert first["returns"] == evaluate_policy(config, policy, params, 3, 7)["returns"]
    assert second["returns"] == evaluate_policy(config, policy, params, 3, 70)["returns"]
    assert first["returns"] != second["returns"]  # new episodes each call
