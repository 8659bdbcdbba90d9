"""Policy networks (flax) and the pure functions that act with them."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class MLPActorCritic(nn.Module):
    """Separate tanh MLPs for the policy logits and the state value.

    Orthogonal initialisation with a small policy head, as in the PPO
    implementation study (Andrychowicz et al., 2021, "What Matters in On-Policy RL").
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    obs_ndim: int = 1
    """Trailing axes of an observation, flattened into the first layer's input (3 for MinAtar's [10, 10, 4])."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.astype(jnp.float32).reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))

        def torso(h: jax.Array) -> jax.Array:
            for width in self.hidden_sizes:
                h = jnp.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(h))
            return h

        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(torso(x))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(torso(x))
        return logits, value[..., 0]


class MLPQNetwork(nn.Module):
    """A ReLU MLP with one Q-value per action, optionally with a dueling head.

    Dueling (Wang et al., 2016, "Dueling Network Architectures for Deep Reinforcement
    Learning"): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``. Returns ``(q, max_a q)`` so
    rollout workers treat it like an actor-critic network (Q-values in place of logits,
    the greedy value in place of the state value).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    dueling: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        # One leading batch axis; stacked frames ([B, k, ...]) are flattened with the rest.
        h = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        for width in self.hidden_sizes:
            h = nn.relu(nn.Dense(width)(h))
        if self.dueling:
            adv = nn.Dense(self.num_actions)(h)
            q = nn.Dense(1)(h) + adv - adv.mean(axis=-1, keepdims=True)
        else:
            q = nn.Dense(self.num_actions)(h)
        return q, q.max(axis=-1)


def forward_packed(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """``[B, A + 1]``: the logits, then the value, in one array (one transfer to the host)."""
    logits, value = apply_fn(params, obs)
    return jnp.concatenate([logits, value[:, None]], axis=-1)


def greedy_action(apply_fn: Callable[..., tuple[jax.Array, jax.Array]], params: Any, obs: jax.Array) -> jax.Array:
    """The most likely action for each observation (evaluation)."""
    logits, _ = apply_fn(params, obs)
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)


# --- Convolutional torsos and heads for pixel observations (Atari) -------------------------


def _frames_to_nhwc(obs: jax.Array, rgb: bool) -> tuple[jax.Array, tuple[int, ...]]:
    """``[*batch, k, H, W]`` (or ``[*batch, k, H, W, 3]`` when ``rgb``), pixel values in
    0..255, to float32 ``[N, H, W, C]`` in [0, 1] with the k stacked frames (times the
    colours) as channels; also returns the batch shape to restore."""
    frame_dims = 4 if rgb else 3
    if obs.ndim < frame_dims + 1:
        raise ValueError(
            f"expected observations [batch..., k, H, W{', 3' if rgb else ''}], got shape {obs.shape}"
        )
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

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x, batch = _frames_to_nhwc(obs, self.rgb)
        init = nn.initializers.orthogonal(np.sqrt(2))
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(nn.Conv(channels, (kernel, kernel), (stride, stride), padding="VALID", kernel_init=init)(x))
        x = nn.relu(nn.Dense(self.features, kernel_init=init)(x.reshape(x.shape[0], -1)))
        return x.reshape(batch + (self.features,))


class _ImpalaResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 convolutions keeping the channel count."""

    channels: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(x))
        h = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(h))
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

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x, batch = _frames_to_nhwc(obs, self.rgb)
        for channels in self.channels:
            x = nn.Conv(channels, (3, 3), padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ImpalaResidualBlock(channels)(x)
            x = _ImpalaResidualBlock(channels)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(self.features)(x))
        return x.reshape(batch + (self.features,))


TORSOS: dict[str, type[nn.Module]] = {"nature": NatureCNN, "impala": ImpalaResNet}
"""Convolutional torsos by name, for ``ConvActorCritic(torso=...)`` and ``ConvQNetwork(torso=...)``."""


def _make_torso(name: str, rgb: bool) -> nn.Module:
    if name not in TORSOS:
        raise ValueError(f"unknown torso {name!r}; choose one of {sorted(TORSOS)}")
    return TORSOS[name](rgb=rgb)


class ConvActorCritic(nn.Module):
    """Policy logits and state value on one shared convolutional torso (``"nature"``:
    :class:`NatureCNN`, ``"impala"``: :class:`ImpalaResNet`), as in the A3C/PPO/IMPALA
    Atari agents. Returns ``(logits [*batch, A], value [*batch])`` like :class:`MLPActorCritic`.
    """

    num_actions: int
    torso: str = "nature"
    rgb: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = _make_torso(self.torso, self.rgb)(obs)
        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(h)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)
        return logits, value[..., 0]


class ConvQNetwork(nn.Module):
    """Q-values on a convolutional torso (Mnih et al., 2015), optionally with the dueling head
    of Wang et al. (2016): ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``.

    Returns ``(q [*batch, A], max_a q [*batch])`` like :class:`MLPQNetwork`. With ``dueling``, the
    value stream is also sown as ``intermediates/state_value`` (``apply(..., mutable=["intermediates"])``).
    """

    num_actions: int
    torso: str = "nature"
    dueling: bool = True
    rgb: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = _make_torso(self.torso, self.rgb)(obs)
        if self.dueling:
            value = nn.Dense(1, name="value")(h)
            adv = nn.Dense(self.num_actions, name="advantage")(h)
            self.sow("intermediates", "state_value", value[..., 0])
            q = value + adv - adv.mean(axis=-1, keepdims=True)
        else:
            q = nn.Dense(self.num_actions, name="q")(h)
        return q, q.max(axis=-1)


def is_frame_stack(obs_shape: Sequence[int]) -> bool:
    """Whether observations are stacks of images ``[k, H, W]`` large enough for the
    convolutional torsos (the Nature CNN's strides need at least 36x36); small grids such
    as MinAtar's ``[10, 10, 4]`` go to an MLP."""
    return len(obs_shape) == 3 and min(obs_shape[1:]) >= 36


def actor_critic_network(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int], torso: str = "nature") -> nn.Module:
    """The policy network for an observation shape: a convolutional torso for image frame
    stacks (``[k, H, W]``), an MLP on the flattened observation for everything else."""
    if is_frame_stack(obs_shape):
        return ConvActorCritic(num_actions, torso)
    return MLPActorCritic(num_actions, tuple(hidden_sizes), max(1, len(obs_shape)))


def q_network(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int], torso: str = "nature", dueling: bool = True) -> nn.Module:
    """The Q-network for an observation shape, chosen as :func:`actor_critic_network` does."""
    if is_frame_stack(obs_shape):
        return ConvQNetwork(num_actions, torso, dueling)
    return MLPQNetwork(num_actions, tuple(hidden_sizes), dueling)
