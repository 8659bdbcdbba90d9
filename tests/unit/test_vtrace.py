"""V-trace targets and advantages (IMPALA, APPO): hand-checked numbers, an independent
numpy recursion, rlax per sequence, jit and no jit, termination vs truncation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from jaxflow.algorithms.appo import APPOConfig
from jaxflow.algorithms.appo import loss as appo_loss
from jaxflow.algorithms.impala import IMPALAConfig, batch_major, encode, loss, vtrace
from jaxflow.networks.mlp import MLPActorCritic
from jaxflow.policies import Categorical, Policy
from jaxflow.rollout.batch import SampleBatch, concat_batches


def numpy_vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, lam=1.0, clip_rho=1.0, clip_pg_rho=1.0):
    """Espeholt et al., 2018, eq. (1), as the backward recursion
    ``vs_s - V(x_s) = delta_s + discount_s * c_s * (vs_{s+1} - V(x_{s+1}))``; the advantage
    bootstraps from ``lambda * vs_{s+1} + (1 - lambda) * V(x_{s+1})`` (the paper's
    ``vs_{s+1}`` at lambda = 1), and from ``V(x_T)`` at the fragment's end."""
    T, B = r_t.shape
    rho_bar = np.minimum(clip_rho, rho_tm1)
    c = lam * np.minimum(1.0, rho_tm1)
    vs = np.zeros((T, B))
    acc = np.zeros(B)
    for s in reversed(range(T)):
        delta = rho_bar[s] * (r_t[s] + discount_t[s] * v_t[s] - v_tm1[s])
        acc = delta + discount_t[s] * c[s] * acc
        vs[s] = v_tm1[s] + acc
    vs_next = np.concatenate([lam * vs[1:] + (1 - lam) * v_tm1[1:], v_t[-1:]], axis=0)
    adv = np.minimum(clip_pg_rho, rho_tm1) * (r_t + discount_t * vs_next - v_tm1)
    return vs, adv


def column(*x):
    return np.asarray(x, np.float32)[:, None]


@pytest.mark.parametrize("jit", [False, True])
def test_on_policy_vtrace_is_the_bootstrapped_return_hand_checked(jit):
    fn = jax.jit(vtrace) if jit else vtrace
    v_tm1, v_t = column(0.5, 1.0), column(1.0, 3.0)
    ones = column(1.0, 1.0)
    # Bootstrap from V(x_T) = 3: vs_1 = 2 + 0.9*3 = 4.7, vs_0 = 1 + 0.9*4.7 = 5.23.
    vs, adv = fn(v_tm1, v_t, column(1.0, 2.0), column(0.9, 0.9), ones)
    np.testing.assert_allclose(np.asarray(vs)[:, 0], [5.23, 4.7], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [4.73, 3.7], rtol=1e-6)
    # Termination at the fragment's last step: no bootstrap, vs_1 = 2, vs_0 = 2.8.
    vs, adv = fn(v_tm1, v_t, column(1.0, 2.0), column(0.9, 0.0), ones)
    np.testing.assert_allclose(np.asarray(vs)[:, 0], [2.8, 2.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [2.3, 1.0], rtol=1e-6)
    # Truncation there: the worker adds gamma * V(final obs) to the reward and sets the
    # discount to 0, which gives exactly the bootstrapped targets again.
    vs, adv = fn(v_tm1, v_t, column(1.0, 2.0 + 0.9 * 3.0), column(0.9, 0.0), ones)
    np.testing.assert_allclose(np.asarray(vs)[:, 0], [5.23, 4.7], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [4.73, 3.7], rtol=1e-6)


@pytest.mark.parametrize("lam, clip_rho, clip_pg_rho", [(1.0, 1.0, 1.0), (0.9, 2.0, 1.5), (0.5, 0.8, 0.8)])
def test_off_policy_vtrace_matches_numpy_recursion_and_rlax(lam, clip_rho, clip_pg_rho):
    rng = np.random.default_rng(0)
    T, B = 7, 5
    v = rng.normal(size=(T + 1, B)).astype(np.float32)
    r = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.95 * (rng.random((T, B)) > 0.2)).astype(np.float32)
    rho = np.exp(rng.normal(scale=0.7, size=(T, B))).astype(np.float32)
    vs, adv = jax.jit(vtrace, static_argnums=(5, 6, 7))(v[:-1], v[1:], r, d, rho, lam, clip_rho, clip_pg_rho)
    ref_vs, ref_adv = numpy_vtrace(v[:-1], v[1:], r, d, rho, lam, clip_rho, clip_pg_rho)
    np.testing.assert_allclose(np.asarray(vs), ref_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(adv), ref_adv, rtol=1e-5, atol=1e-5)
    for b in range(B):  # rlax itself, one sequence at a time
        out = rlax.vtrace_td_error_and_advantage(
            v[:-1, b], v[1:, b], r[:, b], d[:, b], rho[:, b], lam, clip_rho, clip_pg_rho
        )
        np.testing.assert_allclose(np.asarray(vs)[:, b], np.asarray(out.errors) + v[:-1, b], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(adv)[:, b], np.asarray(out.pg_advantage), rtol=1e-5, atol=1e-6)


def _fragments(T=6, B=3, seed=0):
    rng = np.random.default_rng(seed)
    data = dict(
        obs=rng.normal(size=(T, B, 4)).astype(np.float32),
        actions=rng.integers(2, size=(T, B)).astype(np.int32),
        logp=np.log(np.full((T, B), 0.5, np.float32)),
        rewards=np.ones((T, B), np.float32),
        discounts=np.full((T, B), 0.99, np.float32),
        last_obs=rng.normal(size=(B, 4)).astype(np.float32),
    )
    return SampleBatch(data, T * B, np.zeros(0), np.zeros(0), 0)


def test_batch_major_keeps_per_env_fields_and_concatenation_is_consistent():
    a, b = _fragments(seed=1), _fragments(seed=2)
    joined = concat_batches([a, b])
    assert joined.data["obs"].shape == (6, 6, 4) and joined.data["last_obs"].shape == (6, 4)
    np.testing.assert_array_equal(joined.data["last_obs"][3:], b.data["last_obs"])
    host = batch_major(joined.data)
    assert host["obs"].shape == (6, 6, 4) and host["rewards"].shape == (6, 6)
    np.testing.assert_array_equal(host["obs"][4], b.data["obs"][:, 1])  # sequence 4 = b's env 1


@pytest.mark.parametrize("algo", ["IMPALA", "APPO"])
def test_losses_on_policy_reduce_to_actor_critic_with_bootstrapped_returns(algo):
    """With the behaviour policy equal to the current one (rho = 1), the V-trace targets are
    the bootstrapped returns, so the value loss equals a direct computation."""
    net = MLPActorCritic(2, (8,))
    batch = _fragments()
    params = net.init(jax.random.PRNGKey(0), batch.data["obs"][0])
    T, B = 6, 3
    logits, _ = net.apply(params, batch.data["obs"].reshape(T * B, 4))
    logp = jax.nn.log_softmax(logits)[jnp.arange(T * B), batch.data["actions"].reshape(-1)]
    data = dict(batch.data, logp=np.asarray(logp).reshape(T, B))
    host = batch_major(data)
    config, fn = (
        (IMPALAConfig(env="CartPole-v1"), loss) if algo == "IMPALA" else (APPOConfig(env="CartPole-v1"), appo_loss)
    )
    _, metrics = fn(params, host, None, policy=Policy(net, Categorical(2), (4,)), config=config)
    _, v = net.apply(params, np.concatenate([data["obs"], data["last_obs"][None]]).reshape((T + 1) * B, 4))
    v = np.asarray(v).reshape(T + 1, B)
    ret = np.zeros((T, B))
    nxt = v[-1]
    for t in reversed(range(T)):
        nxt = data["rewards"][t] + data["discounts"][t] * nxt
        ret[t] = nxt
    np.testing.assert_allclose(float(metrics["value_loss"]), 0.5 * np.mean((ret - v[:-1]) ** 2), rtol=1e-4)
    if algo == "APPO":
        assert float(metrics["clip_fraction"]) == 0.0  # ratio is exactly 1 on-policy


@pytest.mark.parametrize("algo", ["IMPALA", "APPO"])
def test_frames_sent_once_give_the_same_loss_and_gradients_as_whole_stacks(algo):
    """The worker's encode (frame stacks as single frames) and the learner's rebuild on the
    device change nothing the loss sees: a fragment with a gymnasium-style reset in env 0
    and an ale-py-style zero-padded reset in env 1."""
    T, B, k = 5, 2, 4
    rng = np.random.default_rng(3)
    seq = rng.integers(1, 256, (T + k, B, 3, 3), dtype=np.uint8)  # the newest frames, nonzero
    t, frame_t = np.arange(T + 1)[:, None], np.arange(T + 1)[:, None] + np.arange(k)  # [T+1, k]
    stacks = np.empty((T + 1, B, k, 3, 3), np.uint8)
    # env 0: a new episode at t=3 whose first frame fills its stack; env 1: one at t=2, zero-padded.
    stacks[:, 0] = seq[np.where(t >= 3, np.maximum(frame_t, 3 + k - 1), frame_t), 0]
    stacks[:, 1] = np.where(((t >= 2) & (frame_t < 2 + k - 1))[..., None, None], 0, seq[frame_t, 1])
    data = dict(
        obs=stacks[:-1],
        last_obs=stacks[-1],
        actions=rng.integers(0, 3, (T, B)).astype(np.int32),
        logp=np.log(rng.uniform(0.2, 0.5, (T, B))).astype(np.float32),
        rewards=rng.normal(size=(T, B)).astype(np.float32),
        discounts=np.float32(0.99) * (rng.uniform(size=(T, B)) > 0.2),
    )
    config, fn = (
        (IMPALAConfig(env="CartPole-v1"), loss) if algo == "IMPALA" else (APPOConfig(env="CartPole-v1"), appo_loss)
    )
    encoded = encode(data, config)
    assert set(encoded) == set(data) - {"obs", "last_obs"} | {"frames", "stack_index"}
    assert encoded["frames"].shape == (T + k, B, 3, 3) and (encoded["stack_index"] == -1).any()
    assert encode(data, dataclasses.replace(config, send_frames_once=False)).keys() == data.keys()
    net = MLPActorCritic(3, (8,), obs_ndim=3)
    params = net.init(jax.random.PRNGKey(0), stacks[0])
    policy = Policy(net, Categorical(3), stacks.shape[-3:])
    grad = jax.jit(jax.grad(lambda p, batch: fn(p, batch, None, policy=policy, config=config), has_aux=True))
    g_stacks, m_stacks = grad(params, batch_major(data))
    g_frames, m_frames = grad(params, batch_major(encoded))
    for name in m_stacks:
        np.testing.assert_array_equal(m_frames[name], m_stacks[name], err_msg=name)
    jax.tree_util.tree_map(np.testing.assert_array_equal, g_frames, g_stacks)
