"""Ray Tune for every jaxflow algorithm: :func:`trainable` makes one a Tune trainable (jaxflow's
checkpoints as Tune's, a placement group sized from its config), :func:`parse_search` reads
``--search`` strings, :func:`make_scheduler` names Tune's schedulers, :class:`TrialLines` says each
trial as it ends, and ``jaxflow tune`` (:mod:`jaxflow.tune.command`) runs an experiment from the
command line.

Imported on first use of ``jaxflow.tune`` (``import jaxflow`` does not load Ray Tune).
"""

from jaxflow.tune.experiment import (
    METRIC,
    SCHEDULERS,
    TrialLines,
    best_checkpoint,
    make_scheduler,
    results_table,
    tuner,
)
from jaxflow.tune.search import FORMS, KeepInBounds, SearchDim, parse_search, search_space
from jaxflow.tune.trainable import JaxflowTrainable, placement_for, trainable

__all__ = [
    "FORMS",
    "METRIC",
    "SCHEDULERS",
    "JaxflowTrainable",
    "KeepInBounds",
    "SearchDim",
    "TrialLines",
    "best_checkpoint",
    "make_scheduler",
    "parse_search",
    "placement_for",
    "results_table",
    "search_space",
    "trainable",
    "tuner",
]
