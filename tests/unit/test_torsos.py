"""Convolutional torsos and heads (jaxflow/networks.py) on Atari-shaped uint8 input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow.networks.conv import ConvActorCritic, ConvQNetwork, ImpalaResNet, NatureCNN, cpu_matmul_conv
from jaxflow.policies import Categorical, Greedy, Policy, q_value_outputs

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
    np.testing.assert_allclose(net.apply(params, obs), net.apply(params, obs.astype(np.float32)), rtol=1e-6, atol=1e-6)
    # Channel layout: frames are channels, so permuting the frames changes the output.
    assert not np.allclose(net.apply(params, obs), net.apply(params, obs[:, ::-1]))


@pytest.mark.parametrize("torso", ["nature", "impala"])
def test_actor_critic_head(obs, torso):
    net = ConvActorCritic(A, torso=torso)
    params = net.init(jax.random.PRNGKey(0), obs)
    logits, value = jax.jit(net.apply)(params, obs)
    assert logits.shape == (2, A) and value.shape == (2,)
    policy = Policy(net, Categorical(A), obs.shape[1:])
    assert policy.forward_packed(params, obs).shape == (2, A + 1)  # the rollout workers' call


@pytest.mark.parametrize("torso", ["nature", "impala"])
def test_q_network_dueling_structure(obs, torso):
    net = ConvQNetwork(A, torso=torso, dueling=True)
    params = net.init(jax.random.PRNGKey(0), obs)
    q, state = net.apply(params, obs, mutable=["intermediates"])
    _, q_max = Policy(net, Greedy(A), obs.shape[1:], outputs=q_value_outputs).apply(params, obs)
    assert q.shape == (2, A) and q_max.shape == (2,)
    np.testing.assert_allclose(q_max, q.max(axis=-1), rtol=1e-6)
    (value,) = state["intermediates"]["state_value"]
    np.testing.assert_allclose(q.mean(axis=-1), value, rtol=1e-5, atol=1e-5)  # mean_a A = 0
    q_jit = jax.jit(net.apply)(params, obs)
    np.testing.assert_allclose(q_jit, q, rtol=1e-5, atol=1e-5)


def test_q_network_without_dueling(obs):
    net = ConvQNetwork(A, dueling=False)
    params = net.init(jax.random.PRNGKey(0), obs)
    q = net.apply(params, obs)
    assert q.shape == (2, A)
    assert "value" not in params["params"] and "q" in params["params"]


def test_rgb_stacks_and_unknown_torso():
    rgb = np.zeros((2, 4, 84, 84, 3), np.uint8)
    net = ConvActorCritic(A, torso="nature", rgb=True)
    logits, value = net.apply(net.init(jax.random.PRNGKey(0), rgb), rgb)
    assert logits.shape == (2, A) and value.shape == (2,)
    with pytest.raises(ValueError, match="impala"):
        ConvQNetwork(A, torso="resnet50").init(jax.random.PRNGKey(0), rgb[..., 0])


DN = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize(
    "x_shape, k_shape, strides, padding",
    [
        ((3, 84, 84, 4), (8, 8, 4, 32), (4, 4), "VALID"),  # Nature conv1
        ((3, 20, 20, 32), (4, 4, 32, 64), (2, 2), "VALID"),  # Nature conv2
        ((2, 11, 13, 5), (3, 3, 5, 7), (1, 1), "SAME"),
        ((2, 10, 9, 3), (3, 2, 3, 4), (2, 3), "SAME"),  # odd sizes, uneven strides and kernel
        ((2, 9, 9, 3), (2, 3, 3, 4), (1, 2), ((1, 2), (0, 3))),  # explicit, asymmetric padding
    ],
)
def test_cpu_matmul_conv_equals_xla_convolution_with_gradients(x_shape, k_shape, strides, padding):
    rng = np.random.default_rng(1)
    x, k = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in (x_shape, k_shape))
    g_out = None

    def run(conv):
        nonlocal g_out

        def fn(x, k):
            return conv(x, k, strides, padding, dimension_numbers=jax.lax.conv_dimension_numbers(x.shape, k.shape, DN))

        y, vjp = jax.vjp(jax.jit(fn), x, k)
        g_out = rng.normal(size=y.shape).astype(np.float32) if g_out is None else g_out
        return (y, *vjp(jnp.asarray(g_out)))

    expected = run(jax.lax.conv_general_dilated)
    got = run(cpu_matmul_conv)
    for name, e, g in zip(("output", "input gradient", "kernel gradient"), expected, got):
        assert g.shape == e.shape, name
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(e))), err_msg=name)


def test_cpu_matmul_conv_keeps_xla_convolution_for_dilation_groups_and_other_layouts():
    x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 12, 12, 4)), jnp.float32)
    cases = [
        (
            jnp.ones((3, 3, 4, 6)),
            dict(rhs_dilation=(2, 2), dimension_numbers=jax.lax.conv_dimension_numbers(x.shape, (3, 3, 4, 6), DN)),
        ),
        (
            jnp.ones((3, 3, 2, 6)),
            dict(feature_group_count=2, dimension_numbers=jax.lax.conv_dimension_numbers(x.shape, (3, 3, 2, 6), DN)),
        ),
        (jnp.ones((6, 12, 3, 3)), dict()),  # lax's default NCHW / OIHW layout
    ]
    for k, kwargs in cases:

        def fn(x, k, conv, kwargs=kwargs):
            return conv(x, k, (1, 1), "VALID", **kwargs)

        assert "stablehlo.convolution" in jax.jit(fn, static_argnums=2).lower(x, k, cpu_matmul_conv).as_text()
        np.testing.assert_allclose(fn(x, k, cpu_matmul_conv), fn(x, k, jax.lax.conv_general_dilated), rtol=1e-6)


def test_nature_cnn_is_matrix_products_on_the_cpu_with_xla_convolution_results(obs):
    fast = ConvActorCritic(A)
    xla = ConvActorCritic(A, conv=jax.lax.conv_general_dilated)
    params = fast.init(jax.random.PRNGKey(0), obs)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(xla.init(jax.random.PRNGKey(0), obs))
    assert "stablehlo.convolution" not in jax.jit(fast.apply).lower(params, obs).as_text()
    assert "stablehlo.convolution" in jax.jit(xla.apply).lower(params, obs).as_text()
    # Compiled for an accelerator (lowered here without one), it is XLA's convolution again.
    for platform in ("cuda", "tpu"):
        exported = jax.export.export(jax.jit(fast.apply), platforms=[platform])(params, obs)
        assert "stablehlo.convolution" in exported.mlir_module(), platform
    for got, expected in zip(jax.jit(fast.apply)(params, obs), jax.jit(xla.apply)(params, obs)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # The default ImpalaResNet keeps XLA's convolution (matrix products measured slower for it).
    resnet = ConvActorCritic(A, "impala")
    assert (
        "stablehlo.convolution" in jax.jit(resnet.apply).lower(resnet.init(jax.random.PRNGKey(0), obs), obs).as_text()
    )
