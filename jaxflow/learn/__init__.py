"""The learner: train state, compiled SGD update, learner thread, device feeding."""

from jaxflow.learn.learner import Learner
from jaxflow.learn.optimizers import every_k_steps
from jaxflow.learn.reduce import flat_by_default, flat_minibatch_step, flat_sgd_update, pmean_flat
from jaxflow.learn.schedules import ScheduledLoss, bind_loss, learner_optimizer, piecewise_linear, scheduled_optimizer
from jaxflow.learn.sgd import (
    AnyLoss,
    LossFn,
    StepLoss,
    TrainState,
    apply_gradients,
    copy_to_target,
    guarded_step,
    loss_and_grads,
    make_optimizer,
    minibatch_indices,
    minibatch_step,
    move_target,
    sgd_step,
    sgd_update,
    shard_blocks,
    shuffle_minibatches,
    summarize_metrics,
    take_rows,
    target_fraction,
)
from jaxflow.learn.thread import LearnerThread, LearnerThreadError
from jaxflow.learn.to_device import DeviceBatch, ToDevice, ToDeviceError

__all__ = [
    "AnyLoss",
    "DeviceBatch",
    "Learner",
    "LearnerThread",
    "LearnerThreadError",
    "LossFn",
    "ScheduledLoss",
    "StepLoss",
    "ToDevice",
    "ToDeviceError",
    "TrainState",
    "apply_gradients",
    "bind_loss",
    "copy_to_target",
    "every_k_steps",
    "flat_by_default",
    "flat_minibatch_step",
    "flat_sgd_update",
    "guarded_step",
    "learner_optimizer",
    "loss_and_grads",
    "make_optimizer",
    "minibatch_indices",
    "minibatch_step",
    "move_target",
    "piecewise_linear",
    "pmean_flat",
    "scheduled_optimizer",
    "sgd_step",
    "sgd_update",
    "shard_blocks",
    "shuffle_minibatches",
    "summarize_metrics",
    "take_rows",
    "target_fraction",
]
