"""Convolutional torsos and heads (jaxflow/networks.py) on Atari-shaped uint8 input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow.networks import (
    ConvActorCritic,
    ConvQNetwork,
    ImpalaResNet,
    NatureCNN,
    forward_packed,
)

A = 6


@pytest.fixture(scope="module")
def obs() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(2, 4, 84, 84), dtype=np.uint8)


def num_params(params) -> int:
    return sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize("torso, features", [(NatureCNN(), 512), (ImpalaResNet(), 256)])
def test_torso_output_shapes_and_jit(obs, torso, features):
    params = torso.init(jax.random.PRNGKey(0), obs)
    out = torso.apply(params, obs)
    assert out.shape == (2, features) and out.dtype == jnp.float32
    assert (out >= 0).all()  # ends in a ReLU
    np.testing.assert_allclose(jax.jit(torso.apply)(params, obs), out, rtol=1e-5, atol=1e-5)
    # Extra leading axes ([T, B, ...]) are kept.
    assert torso.apply(params, obs[None]).shape == (1, 2, features)


def test_nature_cnn_parameter_count_matches_the_paper_architecture(obs):
    params = NatureCNN().init(jax.random.PRNGKey(0), obs)
    conv1 = 4 * 8 * 8 * 32 + 32  # 84 -> 20
    conv2 = 32 * 4 * 4 * 64 + 64  # 20 -> 9
    conv3 = 64 * 3 * 3 * 64 + 64  # 9 -> 7
    dense = 7 * 7 * 64 * 512 + 512
    assert num_params(params) == conv1 + conv2 + conv3 + dense == 1_684_128


def test_impala_resnet_parameter_count(obs):
    params = ImpalaResNet().init(jax.random.PRNGKey(0), obs)
    expected, c_in, size = 0, 4, 84
    for c in (16, 32, 32):
        expected += 9 * c_in * c + c  # the stack's first conv
        expected += 4 * (9 * c * c + c)  # two residual blocks of two convs
        c_in, size = c, (size + 1) // 2  # max-pool 3x3/2, SAME padding
    expected += size * size * 32 * 256 + 256
    assert size == 11
    assert num_params(params) == expected


def test_torso_scales_uint8_by_1_over_255(obs):
    net = NatureCNN()
    params = net.init(jax.random.PRNGKey(0), obs)
    np.testing.assert_allclose(
        net.apply(params, obs), net.apply(params, obs.astype(np.float32)), rtol=1e-6, atol=1e-6
    )
    # Channel layout: frames are channels, so permuting the frames changes the output.
    assert not np.allclose(net.apply(params, obs), net.apply(params, obs[:, ::-1]))


@pytest.mark.parametrize("torso", ["nature", "impala"])
def test_actor_critic_head(obs, torso):
    net = ConvActorCritic(A, torso=torso)
    params = net.init(jax.random.PRNGKey(0), obs)
    logits, value = jax.jit(net.apply)(params, obs)
    assert logits.shape == (2, A) and value.shape == (2,)
    assert forward_packed(net.apply, params, obs).shape == (2, A + 1)  # the rollout workers' call


@pytest.mark.parametrize("torso", ["nature", "impala"])
def test_q_network_dueling_structure(obs, torso):
    net = ConvQNetwork(A, torso=torso, dueling=True)
    params = net.init(jax.random.PRNGKey(0), obs)
    (q, q_max), state = net.apply(params, obs, mutable=["intermediates"])
    assert q.shape == (2, A) and q_max.shape == (2,)
    np.testing.assert_allclose(q_max, q.max(axis=-1))
    (value,) = state["intermediates"]["state_value"]
    np.testing.assert_allclose(q.mean(axis=-1), value, rtol=1e-5, atol=1e-5)  # mean_a A = 0
    q_jit, _ = jax.jit(net.apply)(params, obs)
    np.testing.assert_allclose(q_jit, q, rtol=1e-5, atol=1e-5)


def test_q_network_without_dueling(obs):
    net = ConvQNetwork(A, dueling=False)
    params = net.init(jax.random.PRNGKey(0), obs)
    q, q_max = net.apply(params, obs)
    assert q.shape == (2, A) and q_max.shape == (2,)
    assert "value" not in params["params"] and "q" in params["params"]


def test_rgb_stacks_and_unknown_torso():
    rgb = np.zeros((2, 4, 84, 84, 3), np.uint8)
    net = ConvActorCritic(A, torso="nature", rgb=True)
    logits, value = net.apply(net.init(jax.random.PRNGKey(0), rgb), rgb)
    assert logits.shape == (2, A) and value.shape == (2,)
    with pytest.raises(ValueError, match="impala"):
        ConvQNetwork(A, torso="resnet50").init(jax.random.PRNGKey(0), rgb[..., 0])
