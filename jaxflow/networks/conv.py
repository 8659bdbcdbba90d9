"""Convolutional torsos and heads for pixel observations (Atari)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxflow.networks.mlp import policy_head, q_head
from jaxflow.networks.noisy import DEFAULT_SIGMA0, NoisyDense

ConvFn = Callable[..., jax.Array]
"""A function with ``lax.conv_general_dilated``'s signature (``flax.linen.Conv``'s ``conv_general_dilated``)."""


def _is_plain_nhwc_conv(
    lhs: jax.Array,
    rhs: jax.Array,
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    dimension_numbers: Any,
    feature_group_count: int,
    kwargs: dict[str, Any],
) -> bool:
    """Whether :func:`cpu_matmul_conv`'s arguments ask for a plain strided NHWC convolution:
    one group, no dilation, HWIO kernel, no further options; only those become matrix products."""
    return (
        lhs.ndim == 4
        and feature_group_count == 1
        and not kwargs
        and all(d == 1 for d in (*(lhs_dilation or (1, 1)), *(rhs_dilation or (1, 1))))
        and dimension_numbers == lax.conv_dimension_numbers(lhs.shape, rhs.shape, ("NHWC", "HWIO", "NHWC"))
    )


def _patches_times_kernel(
    x: jax.Array,
    kernel: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    precision: Any,
) -> jax.Array:
    """A plain strided NHWC convolution of ``x`` by the HWIO ``kernel``, as one matrix
    product of ``x``'s image patches and the flattened kernel (im2col)."""
    pads = (
        lax.padtype_to_pads(x.shape[1:3], kernel.shape[:2], window_strides, padding)
        if isinstance(padding, str)
        else padding
    )
    x = jnp.pad(x, [(0, 0), *pads, (0, 0)])
    (n, h, w, c), (kh, kw, _, out), (sh, sw) = x.shape, kernel.shape, window_strides
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    # Channels ordered (row, column, channel), as the HWIO kernel flattens.
    patches = jnp.concatenate(
        [
            lax.slice(x, (0, i, j, 0), (n, i + sh * (oh - 1) + 1, j + sw * (ow - 1) + 1, c), (1, sh, sw, 1))
            for i in range(kh)
            for j in range(kw)
        ],
        axis=-1,
    )
    y = jnp.dot(patches.reshape(-1, kh * kw * c), kernel.reshape(-1, out), precision=precision)
    return y.reshape(n, oh, ow, out)


def cpu_matmul_conv(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    precision: Any = None,
    **kwargs: Any,
) -> jax.Array:
    """``lax.conv_general_dilated`` that, compiled for the CPU, computes a 2-D NHWC
    convolution as one matrix product of image patches and the kernel (im2col; Chellapilla
    et al., 2006, "High Performance Convolutional Neural Networks for Document Processing").

    XLA:CPU multiplies matrices much faster than it convolves, gradients most of all. For
    the Nature CNN on 2 cores: a gradient on 528 Atari observations takes 0.5-0.6 s this way
    against 1.2 s as convolutions, and a worker's forward pass on 32 of them 8.7 ms against
    10.3 ms. Small 3x3 convolutions are slower this way, their patches being 9x the input
    (see :class:`ImpalaResNet`). The kernel and the results are the same (up to float
    rounding), so parameters move freely between the two. Other platforms, and anything but
    a plain strided NHWC convolution, get XLA's convolution: ``lax.platform_dependent`` lowers
    only the branch of the platform compiled for.

    Example:
        >>> conv = flax.linen.Conv(32, (8, 8), (4, 4), conv_general_dilated=cpu_matmul_conv)  # doctest: +SKIP
    """
    # Callable[..., ...]: mypy cannot tell which parameters ``**kwargs`` leaves to the caller.
    conv: Callable[..., jax.Array] = functools.partial(
        lax.conv_general_dilated,
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count,
        precision=precision,
        **kwargs,
    )
    if not _is_plain_nhwc_conv(lhs, rhs, lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, kwargs):
        return conv(lhs, rhs)
    matmul = functools.partial(
        _patches_times_kernel, window_strides=window_strides, padding=padding, precision=precision
    )
    return lax.platform_dependent(lhs, rhs, cpu=matmul, default=conv)


def _frames_to_nhwc(obs: jax.Array, rgb: bool) -> tuple[jax.Array, tuple[int, ...]]:
    """``[*batch, k, H, W]`` (or ``[*batch, k, H, W, 3]`` when ``rgb``), pixel values in
    0..255, to float32 ``[N, H, W, C]`` in [0, 1] with the k stacked frames (times the
    colours) as channels; also returns the batch shape to restore."""
    frame_dims = 4 if rgb else 3
    if obs.ndim < frame_dims + 1:
        raise ValueError(f"expected observations [batch..., k, H, W{', 3' if rgb else ''}], got shape {obs.shape}")
    batch = obs.shape[:-frame_dims]
    x = obs.reshape((-1,) + obs.shape[-frame_dims:])
    if rgb:  # [N, k, H, W, 3] -> [N, H, W, k, 3] -> [N, H, W, 3k]
        x = jnp.transpose(x, (0, 2, 3, 1, 4)).reshape(x.shape[0], x.shape[2], x.shape[3], -1)
    else:  # [N, k, H, W] -> [N, H, W, k]
        x = jnp.transpose(x, (0, 2, 3, 1))
    return x.astype(jnp.float32) / 255.0, batch


class NatureCNN(nn.Module):
    """The DQN torso of Mnih et al. (2015), "Human-level control through deep reinforcement
    learning" (Nature 518): conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1, dense 512, ReLU.

    Input: stacked frames ``[*batch, k, H, W]`` (uint8, as ``envs.atari`` makes them; with
    ``rgb``, ``[*batch, k, H, W, 3]``), scaled by 1/255. Output: features ``[*batch, 512]``.
    Orthogonal initialisation with gain sqrt(2), as is usual for ReLU layers in PPO.
    """

    features: int = 512
    rgb: bool = False
    conv: ConvFn = cpu_matmul_conv
    """How the convolutions are computed: as matrix products on the CPU (measured faster for
    all three layers, acting and learning), or ``lax.conv_general_dilated``."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x, batch = _frames_to_nhwc(obs, self.rgb)
        init = nn.initializers.orthogonal(np.sqrt(2))
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(
                nn.Conv(
                    channels,
                    (kernel, kernel),
                    (stride, stride),
                    padding="VALID",
                    kernel_init=init,
                    conv_general_dilated=self.conv,
                )(x)
            )
        x = nn.relu(nn.Dense(self.features, kernel_init=init)(x.reshape(x.shape[0], -1)))
        return x.reshape(batch + (self.features,))


class _ImpalaResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 convolutions keeping the channel count."""

    channels: int
    conv: ConvFn

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Conv(self.channels, (3, 3), padding="SAME", conv_general_dilated=self.conv)(nn.relu(x))
        h = nn.Conv(self.channels, (3, 3), padding="SAME", conv_general_dilated=self.conv)(nn.relu(h))
        return x + h


class ImpalaResNet(nn.Module):
    """The deep torso of Espeholt et al. (2018), "IMPALA: Scalable Distributed Deep-RL with
    Importance Weighted Actor-Learner Architectures": three stacks of (conv 3x3, max-pool
    3x3/2, two residual blocks) with 16, 32, 32 channels, then ReLU, dense 256, ReLU.

    Input and output layouts as :class:`NatureCNN` (``[*batch, k, H, W]`` -> ``[*batch, 256]``).
    """

    channels: Sequence[int] = (16, 32, 32)
    features: int = 256
    rgb: bool = False
    conv: ConvFn = lax.conv_general_dilated
    """How the convolutions are computed. XLA's convolution by default: this torso's 3x3
    convolutions with few channels are slower as :func:`cpu_matmul_conv`'s matrix
    products (their patches are 9x the activations)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x, batch = _frames_to_nhwc(obs, self.rgb)
        for channels in self.channels:
            x = nn.Conv(channels, (3, 3), padding="SAME", conv_general_dilated=self.conv)(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ImpalaResidualBlock(channels, self.conv)(x)
            x = _ImpalaResidualBlock(channels, self.conv)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(self.features)(x))
        return x.reshape(batch + (self.features,))


TORSOS: dict[str, type[nn.Module]] = {"nature": NatureCNN, "impala": ImpalaResNet}
"""Convolutional torsos by name, for ``ConvActorCritic(torso=...)`` and ``ConvQNetwork(torso=...)``."""


def _make_torso(name: str, rgb: bool, conv: ConvFn | None) -> nn.Module:
    if name not in TORSOS:
        raise ValueError(f"unknown torso {name!r}; choose one of {sorted(TORSOS)}")
    return TORSOS[name](rgb=rgb) if conv is None else TORSOS[name](rgb=rgb, conv=conv)


class ConvActorCritic(nn.Module):
    """Policy's distribution inputs and state value on one shared convolutional torso
    (``"nature"``: :class:`NatureCNN`, ``"impala"``: :class:`ImpalaResNet`), as in the
    A3C/PPO/IMPALA Atari agents. Returns ``(inputs [*batch, D], value [*batch])`` like
    :class:`~jaxflow.networks.mlp.MLPActorCritic`.
    """

    num_outputs: int
    torso: str = "nature"
    rgb: bool = False
    conv: ConvFn | None = None
    """The torso's convolution (None: the torso's default)."""
    num_free_outputs: int = 0
    """Outputs that are parameters, not functions of the observation (see :func:`policy_head`)."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = _make_torso(self.torso, self.rgb, self.conv)(obs)
        inputs = policy_head(self, h, self.num_outputs, self.num_free_outputs)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)
        return inputs, value[..., 0]


class ConvQNetwork(nn.Module):
    """Q-values on a convolutional torso (Mnih et al., 2015), optionally with the dueling head
    of Wang et al. (2016): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``.

    Returns ``q [*batch, A]`` like :class:`~jaxflow.networks.mlp.MLPQNetwork` (``[*batch, A, N]``
    with ``num_atoms > 1``; with ``noisy`` the head's layers are noisy, the torso is not, as
    in Rainbow). With ``dueling``, the value stream is also sown as
    ``intermediates/state_value`` (``apply(..., mutable=["intermediates"])``).
    """

    num_actions: int
    torso: str = "nature"
    dueling: bool = True
    rgb: bool = False
    conv: ConvFn | None = None
    """The torso's convolution (None: the torso's default)."""
    num_atoms: int = 1
    noisy: bool = False
    noisy_sigma0: float = DEFAULT_SIGMA0

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        h = _make_torso(self.torso, self.rgb, self.conv)(obs)
        q, value = q_head(h, self.num_actions, self.num_atoms, self.dueling, self._dense)
        if value is not None:
            self.sow("intermediates", "state_value", value[..., 0] if self.num_atoms == 1 else value)
        return q

    def _dense(self, features: int, role: str) -> nn.Module:
        return NoisyDense(features, self.noisy_sigma0, name=role) if self.noisy else nn.Dense(features, name=role)
