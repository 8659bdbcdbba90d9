"""The learner: train state, compiled SGD update, learner thread, device feeding."""

from jaxflow.learn.learner import Learner
from jaxflow.learn.optimizers import every_k_steps
from jaxflow.learn.sgd import (
    LossFn,
    TrainState,
    apply_gradients,
    copy_to_target,
    make_optimizer,
    minibatch_indices,
    minibatch_step,
    move_target,
    sgd_step,
    sgd_update,
    shuffle_minibatches,
    summarize_metrics,
    target_fraction,
)
from jaxflow.learn.thread import LearnerThread, LearnerThreadError
from jaxflow.learn.to_device import DeviceBatch, ToDevice, ToDeviceError

__all__ = [
    "DeviceBatch",
    "Learner",
    "LearnerThread",
    "LearnerThreadError",
    "LossFn",
    "ToDevice",
    "ToDeviceError",
    "TrainState",
    "apply_gradients",
    "copy_to_target",
    "every_k_steps",
    "make_optimizer",
    "minibatch_indices",
    "minibatch_step",
    "move_target",
    "sgd_step",
    "sgd_update",
    "shuffle_minibatches",
    "summarize_metrics",
    "target_fraction",
]
