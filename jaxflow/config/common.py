"""The fields every algorithm's config shares, and its groups of rollout, device-mode and optimizer settings."""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar, Literal

from jaxflow.config.constants import MAX_EVALUATION_EPISODES, MAX_SEED
from jaxflow.config.fields import COUNT, NON_NEGATIVE, POSITIVE, SIZE, UNIT, Check, _type_ok, param, require, validate
from jaxflow.config.groups import DeviceConfig, OptimizerConfig, RolloutConfig
from jaxflow.config.names import StrictKeywords, field_type, flat_names, is_field, replace_config, resolve
from jaxflow.config.schedules import float_fields, perturbable, validate_schedules

RECURRENT_SUPPORT = "PPO (device and Ray mode), A2C, IMPALA and APPO (Ray mode), and R2D2 (device and Ray mode)"
"""Where ``use_lstm`` trains, as a refusal names it (each config's ``recurrent_modes``)."""

DEFAULT_LSTM_SIZE = 64
"""Units of jaxflow's LSTM where ``lstm_size`` is left unset."""

MAX_LAYER_WIDTH = 2**15
"""The widest layer ``hidden_sizes`` and ``lstm_size`` may ask for (32,768 units): a square
layer of it holds 2**30 float32 weights (4 GiB, three times that with Adam's moments). Far
wider than any published RL network; a typo (``hidden_sizes=64000000``) fails here, not as
an out-of-memory error once the run has started."""

CALLBACK_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[\w.<>]+$")
"""A name ``callbacks`` holds: ``module:Attr``, Attr a dotted path in the module (a class made
inside a function has ``<locals>`` in its path: it is known only to the process that made it)."""

LEARNER_GROUP_SUPPORT = "PPO, A2C, IMPALA, APPO, DQN, Ape-X and Rainbow"
"""Where ``num_learners > 1`` trains, as a refusal names it (each config's ``learner_group``)."""


@dataclasses.dataclass(frozen=True)
class CommonConfig(StrictKeywords):
    """Fields every algorithm shares; algorithm configs extend this dataclass.

    The settings of its rollouts, of device mode and of the optimizer are groups of their
    own (``config.rollout.num_workers``); users name them flat or dotted, see
    :mod:`jaxflow.config.names`.
    """

    on_policy = False  # not a field: on-policy algorithms set it, and cannot sample ahead
    learner_group: ClassVar[bool] = False
    """Whether the algorithm's plan runs with a learner group (``num_learners > 1``)."""
    loss_fields: ClassVar[tuple[str, ...]] = ()
    """Float fields that only the learner's loss reads: what ``schedules`` may name besides
    the optimizer's ``lr`` and ``max_grad_norm`` (a field also read on the rollout workers,
    such as ``gamma`` or GAE's lambda, would follow the schedule on one side only)."""
    recurrent_modes: ClassVar[tuple[str, ...]] = ()
    """The modes (``"device"``, ``"ray"``) in which this algorithm trains a recurrent policy
    (``use_lstm``); none: ``use_lstm=True`` is refused."""
    asynchronous_plan: ClassVar[str] = ""
    """Why this algorithm's Ray-mode plan cannot run the same way twice for one seed (what its
    actors act with or its learner trains on depends on which process is faster), as a
    refusal of ``deterministic=True`` in Ray mode names it; empty where it can."""

    env: str = "CartPole-v1"
    """Environment id, see `jaxflow list`."""
    env_config: dict = param(None, factory=dict)
    """Keyword arguments for the environment's constructor."""
    seed: int = param(0, Check(low=0, high=MAX_SEED, high_name="MAX_SEED"))
    """Seeds parameters, learner RNG, and every environment copy; 0 to ``MAX_SEED`` (2**30 - 1)."""
    gamma: float = param(0.99, UNIT)
    """Discount factor."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the MLP torso's layers (flat observations)."""
    conv_torso: Literal["nature", "impala"] = "nature"
    """Convolutional torso for image observations ([k, H, W] frame stacks): Nature DQN's CNN or IMPALA's ResNet."""
    model: str | None = None
    """Your own flax module in place of the default network: a name registered with
    ``jaxflow.register_model`` or ``"package.module:Class"`` (see :mod:`jaxflow.networks.models`)."""
    model_config: dict = param(None, factory=dict)
    """Keyword arguments of ``model``."""
    use_lstm: bool = False
    """A recurrent policy: an LSTM of ``lstm_size`` units after the MLP torso, its state
    carried across steps and reset where an episode starts (see :mod:`jaxflow.networks.recurrent`);
    with ``model``, that model is the recurrent network (see :mod:`jaxflow.networks.models`)."""
    lstm_size: int | None = param(
        None, Check(low=0, high=MAX_LAYER_WIDTH, low_inclusive=False, high_name="MAX_LAYER_WIDTH")
    )
    """Units of jaxflow's LSTM (``use_lstm`` without ``model``); unset: ``DEFAULT_LSTM_SIZE``.
    Refused with ``model``, whose module decides its own core (sizes through ``model_config``)."""
    state_dependent_std: bool = False
    """Box actions: the Gaussian's log-std is an output of the network (else one learned parameter per action dimension)."""
    metrics_num_episodes: int = param(100, SIZE)
    """episode_return_mean averages this many most recent episodes."""
    min_env_steps_per_iteration: int = param(0, COUNT)
    """A training iteration lasts at least this many sampled env steps."""
    evaluation_interval: int = param(0, COUNT)
    """Every this many training iterations the greedy policy plays ``evaluation_episodes``
    episodes on environments of its own, apart from training's counters (0: never); results
    under ``evaluation``. In Ray mode it runs in its own actor while training goes on."""
    evaluation_episodes: int = param(
        10, Check(low=1, high=MAX_EVALUATION_EPISODES, high_name="MAX_EVALUATION_EPISODES")
    )
    """Episodes per evaluation."""
    mode: Literal["auto", "ray", "device"] = "auto"
    """Ray rollout workers, or rollout and update compiled together on the device (gymnax and
    brax envs only); "auto" picks device mode for such an env when the algorithm has one."""
    rollout: RolloutConfig = param(None, factory=RolloutConfig)
    """Ray mode's rollout workers: how many, their environments and fragments, their resources."""
    device: DeviceConfig = param(None, factory=DeviceConfig)
    """Device mode: environments, iterations per compiled call, and the agents trained together."""
    optimizer: OptimizerConfig = param(None, factory=OptimizerConfig)
    """The learner's Adam optimizer: learning rate and gradient clipping."""
    num_learners: int = param(1, POSITIVE)
    """Ray mode: learner processes (Ray actors forming one JAX multi-process runtime, each
    training on its share of every batch; see :mod:`jaxflow.learn.group`); 1 is the learner
    in the driver. Only algorithms whose config sets ``learner_group`` take more than 1."""
    num_cpus_per_learner: float = param(1.0, NON_NEGATIVE)
    """CPUs Ray reserves for each learner process (with ``num_learners > 1``)."""
    deterministic: bool = False
    """Ray mode: the same seed gives the same results and weights, run after run. Replay
    algorithms (DQN, Rainbow, SAC, TD3, DDPG) then sample in lockstep rounds: every worker's
    fragment, then the round's SGD steps, then new weights for all, no sampling overlapping
    training (slower, see docs/algorithms.md); the on-policy plans and device mode are
    deterministic either way. Refused for the asynchronous plans (IMPALA, APPO, A3C, Ape-X,
    R2D2 in Ray mode) and with ``sample_async``."""
    schedules: dict = param(None, factory=dict)
    """Float fields that follow a piecewise-linear schedule over optimizer steps, e.g.
    ``{"lr": [[0, 3e-4], [100000, 0.0]], "ent_coef": [[0, 0.01], [50000, 0.0]]}``
    (see :mod:`jaxflow.config.schedules`)."""
    callbacks: tuple[str, ...] = ()
    """Your hooks into the run, called in order: ``"module:Attr"`` names of classes (made with no
    arguments) or objects with any of ``on_train_result(algo, result)``, ``on_checkpoint(algo,
    path)`` and ``on_episode_end(episode)`` (see ``jaxflow.Callbacks``), e.g.
    ``--import my_metrics --set callbacks=my_metrics:Metrics``; ``Algorithm.build(callbacks=...)``
    takes the classes or objects themselves and stores their names here."""

    def __post_init__(self) -> None:
        validate(self)
        bad = [n for n in self.callbacks if not CALLBACK_NAME.match(n)]
        require(
            not bad,
            f"{type(self).__name__}.callbacks takes 'module:Attr' names (e.g. my_metrics:Metrics), got {bad[0]!r}."
            if bad
            else "",
        )
        self._validate_sweep()
        self._validate_pbt()
        validate_schedules(self)
        self._validate_recurrent()
        require(
            all(0 < h <= MAX_LAYER_WIDTH for h in self.hidden_sizes),
            f"{type(self).__name__}.hidden_sizes must be layer widths from 1 to {MAX_LAYER_WIDTH} (MAX_LAYER_WIDTH), "
            f"got {self.hidden_sizes}.",
        )
        require(
            self.rollout.vector_env != "ale" or self.env.startswith("ALE/"),
            f"vector_env='ale' runs ALE/<Game>-v5 environments only, not {self.env!r}; use vector_env='python'.",
        )
        require(  # "auto" steps in Python outside ALE, so groups there are as refused as with "python"
            self.rollout.num_env_groups == 1 or self.env.startswith("ALE/") or self.rollout.vector_env == "envpool",
            f"num_env_groups={self.rollout.num_env_groups} needs vector_env='ale', which runs ALE/<Game>-v5 "
            f"environments only, not {self.env!r}, or vector_env='envpool' (python envs step in the worker's thread).",
        )
        require(
            self.num_learners == 1 or self.learner_group,
            f"{type(self).__name__}.num_learners={self.num_learners}: this algorithm trains with one learner; "
            f"num_learners > 1 is for {LEARNER_GROUP_SUPPORT}.",
        )
        require(
            not (self.deterministic and self.rollout.sample_async),
            f"{type(self).__name__}.deterministic=True with sample_async=True: a worker sampling ahead acts with "
            "whichever weights reached it in time; set sample_async=False.",
        )
        require(
            not (self.rollout.sample_async and self.on_policy),
            f"{type(self).__name__}.sample_async=True: this algorithm trains on-policy, and a worker sampling "
            "ahead acts with weights one update old; use it with IMPALA, APPO, DQN or APEX.",
        )

    @property
    def lstm_units(self) -> int:
        """The units of jaxflow's LSTM: ``lstm_size``, or ``DEFAULT_LSTM_SIZE`` where unset."""
        return DEFAULT_LSTM_SIZE if self.lstm_size is None else self.lstm_size

    def _validate_recurrent(self) -> None:
        name, modes = type(self).__name__, type(self).recurrent_modes
        require(
            self.model is None or self.lstm_size is None,
            f"{name}.lstm_size={self.lstm_size} with model={self.model!r}: the model decides its own recurrent core "
            "(its sizes through model_config); leave lstm_size unset, or drop model for jaxflow's LSTM.",
        )
        if not self.use_lstm:
            return
        require(
            bool(modes),
            f"{name}.use_lstm=True: {name.removesuffix('Config')} has no recurrent policy yet; "
            f"use_lstm is supported by {RECURRENT_SUPPORT}.",
        )
        require(
            self.mode == "auto" or self.mode in modes,
            f"{name}.use_lstm=True trains in {' or '.join(modes)} mode only so far, not mode={self.mode!r}.",
        )
        require(
            self.num_learners == 1,
            f"{name}.use_lstm=True trains with one learner so far, not num_learners={self.num_learners}.",
        )

    def _validate_sweep(self) -> None:
        sweep = self.device.sweep
        if not sweep:
            return
        cls, name = type(self), type(self).__name__
        require(len(sweep) == 1, f"{name}.sweep takes one field, got {sorted(sweep)}.")
        field, values = next(iter(sweep.items()))
        require(
            is_field(cls, field) and resolve(cls, field) != ("device", "sweep"),
            f"{name}.sweep: no field {field!r}. Fields: {', '.join(flat_names(cls))}.",
        )
        require(
            field_type(cls, resolve(cls, field)) is float,
            f"{name}.sweep: {field!r} is not a float field; only numeric fields ({', '.join(float_fields(cls))}) can be swept.",
        )
        require(
            isinstance(values, (list, tuple)) and len(values) > 0 and all(_type_ok(v, float) for v in values),
            f"{name}.sweep[{field!r}] must be a non-empty list of numbers, got {values!r}.",
        )
        for v in values:  # each value must be valid where the field itself is set
            replace_config(self, sweep={}, pbt=(), **{field: float(v)})

    def _validate_pbt(self) -> None:
        fields, name = self.device.pbt, type(self).__name__
        if not fields:
            return
        allowed = perturbable(type(self))
        for field in fields:
            require(
                is_field(type(self), field) and resolve(type(self), field) in [resolve(type(self), f) for f in allowed],
                f"{name}.pbt: {field!r} is not a hyperparameter population-based training can perturb; "
                f"{name}'s that it can: {', '.join(allowed)}.",
            )
            require(
                all(resolve(type(self), field) != resolve(type(self), s) for s in self.schedules),
                f"{name}.pbt: {field!r} follows a schedule; a field is either scheduled or perturbed by PBT.",
            )
        require(
            len({resolve(type(self), f) for f in fields}) == len(fields), f"{name}.pbt names a field twice: {fields}."
        )
        count = self.device.num_seeds * len(next(iter(self.device.sweep.values()), [None]))
        require(
            count >= 2,
            f"{name}.pbt needs a population of at least 2 members (num_seeds x sweep values), got {count}.",
        )
