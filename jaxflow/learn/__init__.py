"""The learner: train state, compiled SGD update, learner thread, device feeding."""

from jaxflow.learn.learner import Learner
from jaxflow.learn.sgd import (
    LossFn,
    TrainState,
    apply_gradients,
    copy_to_target,
    make_optimizer,
    minibatch_indices,
    minibatch_step,
    sgd_step,
    sgd_update,
    shuffle_minibatches,
    summarize_metrics,
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
    "make_optimizer",
    "minibatch_indices",
    "minibatch_step",
    "sgd_step",
    "sgd_update",
    "shuffle_minibatches",
    "summarize_metrics",
]
