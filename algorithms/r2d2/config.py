"""R2D2's settings (Kapturowski et al., 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning"): stored sequences with burn-in, value rescaling, mixed sequence
priorities, and Ape-X's per-actor exploration, beside the replay settings every replay
algorithm shares."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxflow import envs
from jaxflow.algorithms.apex import check_distributed
from jaxflow.config import DeviceConfig, DistributedReplayConfig, OffPolicyConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.fields import COUNT, MAX_SIZE, NON_NEGATIVE, POSITIVE, SIZE, UNIT, Check, param, require

SEQUENCE_PERIOD = 10
"""CartPole-scale: a new sequence every 10 steps, half the stored 20 (the paper's 40 of 120)."""


@dataclasses.dataclass(frozen=True)
class R2D2Config(OffPolicyConfig):
    """R2D2 settings (plus :class:`~jaxflow.config.OffPolicyConfig`'s). Replay counts
    sequences: ``buffer_size``, ``learning_starts`` and ``train_batch_size`` are sequences of
    ``burn_in + trace_length`` steps. As in the paper: priority exponent 0.9, importance
    exponent 0.6 (not annealed), priorities mixing max and mean |TD| with eta = 0.9, value
    rescaling with eps = 1e-3, a dueling LSTM Q-network, double Q-learning with n-step
    returns, Ape-X's epsilons 0.4^(1 + 7 i / (N - 1)) over the N environments (device mode)
    or actors (Ray mode: Ape-X's plan, ``distributed``, ``max_weight_sync_delay``). Scaled to
    CartPole: 4 + 16 steps per sequence (the paper's 40 + 80), 3-step returns (5), a smaller
    network, buffer and target period."""

    recurrent_modes: ClassVar[tuple[str, ...]] = ("device", "ray")
    asynchronous_plan: ClassVar[str] = (
        "Ape-X's plan: actors store into the replay shards and fetch weights, and a learner thread "
        "trains on replayed batches, each at its own pace"
    )
    loss_fields = ("priority_eta",)
    replay_layout = ("rollout.num_workers", "rollout.num_envs_per_worker", "burn_in", "trace_length", "sequence_period")

    rollout: RolloutConfig = param(
        None, factory=lambda: RolloutConfig(num_workers=1, rollout_fragment_length=SEQUENCE_PERIOD)
    )
    """Device mode steps ``rollout_fragment_length`` (= ``sequence_period``) steps per env
    between two replay rounds; in Ray mode ``num_workers`` actors (at least one per replay
    shard), each with its own epsilon, send fragments of that length."""
    device: DeviceConfig = param(None, factory=lambda: DeviceConfig(num_envs=16, iterations_per_call=25))
    """16 environments, each with its own epsilon; 25 fragments (4,000 env steps) per compiled call."""
    optimizer: OptimizerConfig = param(None, factory=lambda: OptimizerConfig(lr=1e-3, max_grad_norm=10.0))
    """Adam; gradients clipped to 10."""
    env: str = "jaxflow/StatelessCartPole-v1"
    """Environment id, see `jaxflow list` (a JAX env trains in device mode unless ``mode='ray'``)."""
    use_lstm: bool = True
    """R2D2's Q-network is recurrent (always on)."""
    hidden_sizes: tuple[int, ...] = (64,)
    """Widths of the MLP torso before the LSTM."""
    dueling: bool = param(True)
    """Dueling value/advantage head on the LSTM's output."""
    burn_in: int = param(4, COUNT)
    """Steps at a sequence's start that only warm the LSTM state up (no loss, no gradient)."""
    trace_length: int = param(16, Check(low=2, high=MAX_SIZE, high_name="MAX_SIZE"))
    """Steps after the burn-in that the loss trains on (its last step is only bootstrapped
    from); at least 2, so ``burn_in`` is always below the sequence length."""
    sequence_period: int = param(SEQUENCE_PERIOD, SIZE)
    """Steps between the starts of two stored sequences of an env (overlapping when below
    ``burn_in + trace_length``); must equal ``rollout_fragment_length`` and divide the length."""
    priority_eta: float = param(0.9, UNIT)
    """A sequence's priority ``eta * max|td| + (1 - eta) * mean|td|``."""
    value_rescaling_eps: float = param(1e-3, POSITIVE)
    """eps in ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``."""
    worker_epsilon_base: float = param(0.4, UNIT)
    """epsilon in ``eps_i = epsilon^(1 + alpha * i / (N - 1))`` over the N environments (Ray mode: actors)."""
    worker_epsilon_alpha: float = param(7.0, NON_NEGATIVE)
    """alpha in ``eps_i = epsilon^(1 + alpha * i / (N - 1))``."""
    n_step: int = param(3, SIZE)
    """Steps summed into each return before bootstrapping (the paper's 5)."""
    train_batch_size: int = param(32, SIZE)
    """Replayed sequences per SGD step."""
    buffer_size: int = param(4_000, SIZE)
    """Sequences kept (the oldest are overwritten)."""
    learning_starts: int = param(200, COUNT)
    """Sequences in the buffer (Ray mode: in each shard) before replay starts."""
    samples_per_insert: float = param(32.0, POSITIVE)
    """Replay ratio: trained steps (``trace_length`` per sequence) per env step sampled; 32
    makes 10 SGD steps of 32 sequences per fragment of 16 envs x 10 steps. In Ray mode the
    shards' rate limiter holds the learner to it (the actors are never held back)."""
    target_update_period: int = param(100, SIZE)
    """SGD steps between two copies of the target network (the paper's 2500)."""
    prioritized_replay_alpha: float = param(0.9, NON_NEGATIVE)
    """The paper's priority exponent 0.9."""
    prioritized_replay_beta: float = param(0.6, UNIT)
    """The paper's importance-sampling exponent 0.6, kept throughout."""
    distributed: DistributedReplayConfig = param(None, factory=lambda: DistributedReplayConfig(replay_batch_size=64))
    """Ray mode: replayed sequences per request (two SGD steps), requests in flight and the
    learner thread's queues (see :class:`~jaxflow.config.DistributedReplayConfig`)."""
    max_weight_sync_delay: int = param(400, SIZE)
    """Ray mode: env steps an actor samples between two fetches of the learner's weights (the paper's 400)."""

    def __post_init__(self) -> None:
        name, length = type(self).__name__, self.burn_in + self.trace_length
        super().__post_init__()
        if self.mode == "ray" or (self.mode == "auto" and not on_device(self.env)):
            check_ray_mode(self)
        require(self.use_lstm, f"{name}.use_lstm=False: R2D2's Q-network is recurrent; leave use_lstm on.")
        require(
            length % self.sequence_period == 0,
            f"{name}.sequence_period ({self.sequence_period}) must divide the sequence length burn_in + "
            f"trace_length ({length}).",
        )
        require(
            self.rollout.rollout_fragment_length == self.sequence_period,
            f"{name}.rollout_fragment_length ({self.rollout.rollout_fragment_length}) must equal sequence_period "
            f"({self.sequence_period}): each fragment starts one stored sequence per env.",
        )
        require(
            self.n_step < self.trace_length,
            f"{name}.n_step ({self.n_step}) must be below trace_length ({self.trace_length}).",
        )
        require(
            self.model is None,
            f"{name}.model: R2D2's recurrent Q-network takes no custom model yet (model={self.model!r}); "
            "a recurrent model of your own trains PPO, A2C, IMPALA and APPO (with use_lstm=True).",
        )


def on_device(env: str) -> bool:
    """Whether mode 'auto' trains ``env`` in device mode: a JAX env (an unknown id counts as
    one here, refused as unknown once the run looks it up)."""
    try:
        return envs.entry(env).kind in envs.JAX_KINDS
    except envs.UnknownEnvError:
        return True


def check_ray_mode(config: R2D2Config) -> None:
    """What Ray mode needs: Ape-X's (``check_distributed``), and an actor for every shard."""
    check_distributed(config)
    require(
        config.num_replay_shards <= config.rollout.num_workers,
        f"{type(config).__name__}.num_replay_shards ({config.num_replay_shards}) must be at most num_workers "
        f"({config.rollout.num_workers}): each actor's fragments go to one shard.",
    )
