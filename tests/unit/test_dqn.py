"""DQN and Ape-X math: n-step targets, (double) Q-learning TD errors, the loss, exploration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import ConfigError, make_config
from jaxflow.algorithms.apex import APEXConfig, worker_epsilon
from jaxflow.algorithms.dqn import (
    DQNConfig,
    beta_schedule,
    epsilon,
    epsilon_greedy,
    epsilon_schedule,
    importance_exponent,
    loss,
    n_step_targets,
    postprocess,
    td_errors,
)
from jaxflow.networks.mlp import MLPQNetwork
from jaxflow.policies import Greedy, Policy, q_value_outputs


def numpy_n_step(r, d, n):
    T, B = r.shape
    g, disc, k = np.zeros((T, B)), np.ones((T, B)), np.zeros((T, B), int)
    for b in range(B):
        for t in range(T):
            acc, total, steps = 1.0, 0.0, 0
            for i in range(min(n, T - t)):
                total += acc * r[t + i, b]
                acc *= d[t + i, b]
                steps += 1
            g[t, b], disc[t, b], k[t, b] = total, acc, steps
    return g, disc, k


def test_n_step_targets_hand_checked():
    # gamma 0.9, an episode ends after step 1 (discount 0 there).
    r = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
    d = np.array([[0.9], [0.0], [0.9], [0.9]], np.float32)
    g, disc, k = jax.jit(n_step_targets, static_argnums=2)(r, d, 3)
    # t=0: 1 + 0.9*2, then the termination stops it; t=2: 3 + 0.9*4 (fragment ends); t=3: 4.
    np.testing.assert_allclose(np.asarray(g)[:, 0], [2.8, 2.0, 6.6, 4.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(disc)[:, 0], [0.0, 0.0, 0.81, 0.9], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(k)[:, 0], [3, 3, 2, 1])


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_targets_match_loop(n):
    rng = np.random.default_rng(n)
    r = rng.normal(size=(9, 4)).astype(np.float32)
    d = (0.97 * (rng.random((9, 4)) > 0.2)).astype(np.float32)
    g, disc, k = n_step_targets(jnp.asarray(r), jnp.asarray(d), n)
    ref_g, ref_d, ref_k = numpy_n_step(r, d, n)
    np.testing.assert_allclose(np.asarray(g), ref_g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(disc), ref_d, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(k), ref_k)


def test_double_q_td_errors_against_numpy():
    rng = np.random.default_rng(0)
    N, A = 16, 3
    q_tm1, q_t_value, q_t_selector = (rng.normal(size=(N, A)).astype(np.float32) for _ in range(3))
    a = rng.integers(A, size=N).astype(np.int32)
    r = rng.normal(size=N).astype(np.float32)
    d = rng.choice([0.0, 0.99], size=N).astype(np.float32)
    rows = np.arange(N)
    double = r + d * q_t_value[rows, q_t_selector.argmax(1)] - q_tm1[rows, a]
    single = r + d * q_t_value.max(1) - q_tm1[rows, a]
    np.testing.assert_allclose(
        np.asarray(td_errors(q_tm1, a, r, d, q_t_value, q_t_selector, True)), double, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(td_errors(q_tm1, a, r, d, q_t_value, q_t_selector, False)), single, rtol=1e-5, atol=1e-6
    )


def test_loss_is_importance_weighted_huber_and_targets_carry_no_gradient():
    net = MLPQNetwork(2, (8,), dueling=True)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(6, 4)).astype(np.float32)
    params = net.init(jax.random.PRNGKey(0), obs)
    target = jax.tree_util.tree_map(lambda x: x + 0.1, params)
    batch = dict(
        obs=obs,
        next_obs=rng.normal(size=(6, 4)).astype(np.float32),
        actions=np.array([0, 1, 0, 1, 1, 0], np.int32),
        rewards=np.array([5.0, -3.0, 0.1, 0.0, 2.0, 0.5], np.float32),
        discounts=np.full(6, 0.99, np.float32),
        weights=np.array([1.0, 0.5, 0.25, 1.0, 0.1, 0.9], np.float32),
    )
    cfg = DQNConfig(env="CartPole-v1", huber_delta=1.0)
    policy = Policy(net, Greedy(2), (4,), outputs=q_value_outputs)
    total, metrics = loss(params, batch, jax.random.PRNGKey(0), target, policy=policy, config=cfg)
    td = np.asarray(metrics["td_error"])
    huber = np.where(np.abs(td) <= 1, 0.5 * td**2, np.abs(td) - 0.5)
    np.testing.assert_allclose(float(total), np.mean(batch["weights"] * huber), rtol=1e-5)
    # Gradients flow only through q_tm1: the target network's parameters get none.
    g_target = jax.grad(lambda tp: loss(params, batch, None, tp, policy=policy, config=cfg)[0])(target)
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree_util.tree_leaves(g_target))


def test_dueling_head_centres_advantages():
    """Q = V + A - mean(A): shifting every advantage by a constant leaves Q unchanged,
    shifting the value moves every Q by exactly that much."""
    net = MLPQNetwork(4, (16,), dueling=True)
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 5))
    params = net.init(jax.random.PRNGKey(0), obs)
    q = net.apply(params, obs)
    assert q.shape == (3, 4)
    _, v = q_value_outputs(q)  # the Q-policy's value: max_a Q
    np.testing.assert_allclose(np.asarray(v), np.asarray(q).max(-1))
    layers = params["params"]  # Dense_0: hidden, Dense_1: advantages [4], Dense_2: value [1]
    assert layers["Dense_1"]["bias"].shape == (4,) and layers["Dense_2"]["bias"].shape == (1,)

    def shifted(layer: str, c: float):
        p = jax.tree_util.tree_map(lambda x: x, params)
        p["params"][layer]["bias"] = p["params"][layer]["bias"] + c
        return np.asarray(net.apply(p, obs))

    np.testing.assert_allclose(shifted("Dense_1", 5.0), np.asarray(q), atol=1e-5)
    np.testing.assert_allclose(shifted("Dense_2", 5.0), np.asarray(q) + 5.0, atol=1e-5)
    # Without the dueling head the same shift of the output layer moves Q.
    plain = MLPQNetwork(4, (16,), dueling=False)
    pp = plain.init(jax.random.PRNGKey(0), obs)
    moved = jax.tree_util.tree_map(lambda x: x, pp)
    moved["params"]["Dense_1"]["bias"] = moved["params"]["Dense_1"]["bias"] + 5.0
    np.testing.assert_allclose(np.asarray(plain.apply(moved, obs)), np.asarray(plain.apply(pp, obs)) + 5.0, atol=1e-5)


def test_postprocess_priorities_hand_checked():
    # T=2, B=1, 2 actions, gamma 0.5, n=1.
    cfg = DQNConfig(env="CartPole-v1", n_step=1, prioritized_replay_eps=0.25)
    traj = dict(
        obs=np.zeros((2, 1, 3), np.float32),
        last_obs=np.ones((1, 3), np.float32),
        actions=np.array([[1], [0]], np.int32),
        rewards=np.array([[1.0], [2.0]], np.float32),
        discounts=np.array([[0.5], [0.5]], np.float32),
        dist_inputs=np.array([[[0.0, 3.0]], [[1.0, 4.0]]], np.float32),
        values=np.array([[3.0], [4.0]], np.float32),
        bootstrap_value=np.array([10.0], np.float32),
        logp=np.zeros((2, 1), np.float32),
    )
    out = postprocess(traj, cfg)
    # t=0: 1 + 0.5*max Q(s_1)=4 -> 3, minus Q(s_0, 1)=3 -> 0; t=1: 2 + 0.5*10 - Q(s_1, 0)=1 -> 6.
    np.testing.assert_allclose(np.asarray(out["priorities"])[:, 0], [0.25, 6.25])
    assert out["obs"] is traj["obs"] and out["last_obs"] is traj["last_obs"]


@pytest.mark.parametrize("prioritized", [True, False])
def test_the_drivers_importance_exponent_is_device_modes_schedule(prioritized):
    cfg = make_config(
        DQNConfig,
        env="CartPole-v1",
        prioritized_replay=prioritized,
        prioritized_replay_beta=0.3,
        beta_annealing_steps=500,
    )
    learner = type("AtStep", (), {"version": 0})()
    beta = beta_schedule(learner, cfg)
    steps = np.arange(0, 800, 9)
    on_host = []
    for s in steps:
        learner.version = int(s)  # read at every call: the learner's SGD steps go on
        on_host.append(beta())
    np.testing.assert_allclose(on_host, importance_exponent(cfg)(steps), rtol=1e-6, atol=1e-7)
    assert on_host[0] == pytest.approx(0.3 if prioritized else 0.0) and on_host[-1] == (1.0 if prioritized else 0.0)


def test_epsilon_schedules():
    cfg = make_config(
        DQNConfig, env="CartPole-v1", num_workers=2, epsilon_initial=1.0, epsilon_final=0.1, epsilon_timesteps=1000
    )
    assert epsilon(cfg, 0, 0) == 1.0
    assert epsilon(cfg, 0, 250) == pytest.approx(0.55)  # 2 workers x 250 steps = half way
    assert epsilon(cfg, 1, 10_000) == pytest.approx(0.1)
    # The workers' numpy line is device mode's optax schedule (float32) at the same step count.
    steps = np.arange(0, 1_200, 7)
    np.testing.assert_allclose(
        [epsilon(cfg, 0, int(s)) for s in steps], epsilon_schedule(cfg)(2 * steps), rtol=1e-6, atol=1e-7
    )
    apex = make_config(APEXConfig, env="CartPole-v1", num_workers=8)
    eps = [worker_epsilon(apex, i) for i in range(8)]
    np.testing.assert_allclose(eps, [0.4 ** (1 + 7 * i / 7) for i in range(8)])
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert worker_epsilon(make_config(APEXConfig, env="CartPole-v1", num_workers=1), 0) == pytest.approx(0.4)


def test_epsilon_greedy_explores_at_the_stated_rate():
    rng = np.random.default_rng(0)
    q = np.tile(np.array([[0.0, 1.0, 0.0, 0.0]]), (200_000, 1))
    actions, _ = epsilon_greedy(rng, q, 0.2)
    # Greedy action 1 with probability 0.8 + 0.2/4; 5 standard deviations of tolerance.
    p = 0.85
    assert abs((actions == 1).mean() - p) < 5 * np.sqrt(p * (1 - p) / len(actions))


def test_invalid_configs_name_the_field():
    with pytest.raises(ConfigError, match="n_step"):
        make_config(DQNConfig, env="CartPole-v1", n_step=16, rollout_fragment_length=16)
    with pytest.raises(ConfigError, match="samples_per_insert"):
        APEXConfig(env="CartPole-v1", samples_per_insert=-1.0)
    with pytest.raises(ConfigError, match="num_replay_shards"):
        DQNConfig(env="CartPole-v1", num_replay_shards=0)
