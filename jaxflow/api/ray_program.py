"""A run on Ray rollout workers: the algorithm's plan over a learner and a worker set (and
replay shards, for replay algorithms)."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gymnasium
import jax

from jaxflow import envs
from jaxflow.api.interrupts import python_sigterm_again
from jaxflow.api.program import CheckpointFiles
from jaxflow.api.spaces import env_spaces
from jaxflow.api.spec import AlgorithmSpec
from jaxflow.config.constants import THREAD_JOIN_TIMEOUT_S
from jaxflow.config.fields import ConfigError
from jaxflow.dataflow import xla_cache
from jaxflow.dataflow.actors import jax_actor, ship_by_value
from jaxflow.dataflow.iterators import LocalIterator
from jaxflow.dataflow.placement import Placement, beside_driver
from jaxflow.learn.group import LearnerGroup
from jaxflow.learn.learner import Learner
from jaxflow.learn.schedules import bind_loss, learner_optimizer
from jaxflow.policies.policy import Policy
from jaxflow.replay.local import replay_in_driver
from jaxflow.rollout.episode_hooks import episode_hooks
from jaxflow.rollout.evaluation import Evaluator, evaluate_policy
from jaxflow.rollout.normalize import Normalizer, normalizer_init
from jaxflow.rollout.postprocess import example_train_batch
from jaxflow.rollout.worker import WorkerSpec
from jaxflow.rollout.worker_set import WorkerSet, check_worker_room

log = logging.getLogger(__name__)


class NormalizedState(NamedTuple):
    """A checkpoint of a run that normalizes: the learner's state and the run's statistics."""

    learner: Any
    normalizer: Normalizer | None


class RayProgram:
    """Workers + learner + plan: the learner in this process, rollout workers as Ray actors
    (or in this process with ``num_workers=0``), replay shards where the algorithm has them,
    and the algorithm's ``plan`` over them. The workers call the ``on_episode_end`` of those of
    ``callbacks`` that have one (their copies, sent with the ``WorkerSpec``).

    Example:
        >>> program = RayProgram(PPOConfig(env="CartPole-v1"), get_algorithm("PPO"))  # doctest: +SKIP
        >>> next(program.results())["env_steps_sampled"]                             # doctest: +SKIP
    """

    def __init__(self, config: Any, spec: AlgorithmSpec, callbacks: Sequence[Any] = ()):
        self.config, self.spec = config, spec
        if spec.plan is None:
            raise ConfigError(f"{spec.name} has no plan: it runs as its own program.")
        xla_cache.use_in_this_process()  # a restored run's learner loads what this or an earlier run compiled
        self.policy, make_learner = learner_factory(config, spec)
        self.learner: Learner | LearnerGroup
        if config.num_learners == 1:
            self.learner = make_learner()
        else:  # the learner processes start (and compile) while the rest starts here
            init_ray()
            self.learner = LearnerGroup(make_learner, config.num_learners, learner_placement(config))
        ship_by_value(self.policy.network)  # a user's own model, from a module the workers may not import
        episodic = tuple(c for c in callbacks if episode_hooks([c]))  # only what the workers call travels
        for callback in episodic:
            ship_by_value(callback)
        worker_spec = WorkerSpec(
            config,
            self.policy,
            spec.postprocess,
            spec.loss if spec.workers.gradients else None,
            spec.workers.encode,
            spec.workers.explore,
            episodic,
        )
        if needs_ray(config, spec):
            init_ray()
            # Before the warm-up: a run the cluster has no room for is refused at once, not once
            # the warm-up thread (which exit waits for) has run an update on the whole batch.
            check_worker_room(config.rollout)
        warm_up = self._start_warm_up(worker_spec)
        # Replay shards first: their processes start up while the workers' do, which the
        # WorkerSet waits for (on a restore, each side's new processes import JAX and compile).
        self.replay = spec.run.replay(config) if spec.run.replay else None
        self.workers = WorkerSet(worker_spec, self.learner.get_weights(), self.learner.version)
        self.files: CheckpointFiles | None = self.replay  # replay contents go with every checkpoint
        if warm_up is not None:
            warm_up.result()
        extra = () if self.replay is None else (self.replay,)
        self._results = spec.plan(self.workers, self.learner, config, *extra)
        obs_space, _ = env_spaces(config, spec)
        self.workers.normalizer = normalizer_init(config, tuple(obs_space.shape or ()))
        self.normalizes = self.workers.normalizer is not None
        self._evaluator: Any = None  # evaluation during training's actor
        if config.evaluation_interval:  # started now: its process starts up beside the workers'
            self._evaluator = jax_actor(Evaluator, **beside_driver()).remote(
                config, self.policy, envs.custom_entry(config.env)
            )
        if self.normalizes:  # the workers' statistics merged once per training iteration
            self._results = self._results.for_each(self._sync_normalizers)

    def _start_warm_up(self, worker_spec: WorkerSpec) -> concurrent.futures.Future | None:
        # Compiling the update takes seconds; overlapping it with worker start-up takes
        # it out of the first iteration.
        if self.spec.learner.train_batch_env_steps is None:
            return None
        obs_space, _ = env_spaces(self.config, self.spec)
        batch = example_train_batch(worker_spec, obs_space, self.spec.learner.train_batch_env_steps(self.config))
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner-warm-up")
        future = pool.submit(self.learner.warm_up, batch)
        pool.shutdown(wait=False)
        return future

    def results(self) -> LocalIterator[dict[str, Any]]:
        return self._results

    def _sync_normalizers(self, result: dict[str, Any]) -> dict[str, Any]:
        self.workers.sync_normalizers()
        return result

    def get_state(self) -> Any:
        """The learner's state, and with normalization the run's statistics beside it."""
        if self.normalizes:
            return NormalizedState(self.learner.get_state(), self.workers.normalizer)
        return self.learner.get_state()

    def set_state(self, state: Any) -> None:
        if self.normalizes:
            state, stats = state
            self.workers.set_normalizers(stats)
        self.learner.set_state(state)
        self.workers.sync_weights(self.learner.get_weights(), self.learner.version)

    def evaluate(self, episodes: int = 10, seed: int | None = None, member: int = 0) -> dict[str, Any]:
        """The learner's greedy policy for ``episodes`` episodes, in this process (observations
        normalized with the run's statistics)."""
        del member  # one agent
        weights = self.learner.get_weights()
        return evaluate_policy(self.config, self.policy, weights, episodes, seed, self.workers.normalizer)

    def evaluate_async(self, episodes: int, seed: int) -> concurrent.futures.Future:
        """:meth:`evaluate` with the learner's current weights, in an actor of its own
        while training goes on (with ``evaluation_interval`` set)."""
        weights = self.learner.get_weights()
        return self._evaluator.evaluate.remote(weights, episodes, seed, self.workers.normalizer).future()

    def node_ids(self) -> dict[str, Any]:
        """The Ray node of each of the run's actors: ``workers`` (by index), ``replay`` (by
        shard) and ``evaluator`` (None where the run has none)."""
        import ray

        evaluator = None if self._evaluator is None else ray.get(self._evaluator.node_id.remote())
        replay = [] if self.replay is None else self.replay.node_ids()
        return {"workers": self.workers.node_ids(), "replay": replay, "evaluator": evaluator}

    def stop(self) -> None:
        """Stops the plan's background threads, the learner thread and the actors, and waits
        for the threads to end."""
        stop_run(self._results, [self.learner], self.workers, self.replay)
        if self._evaluator is not None:
            import ray

            ray.kill(self._evaluator)


def stop_run(results: LocalIterator[Any], learners: list[Any], workers: WorkerSet, replay: Any) -> None:
    """Stops a run on Ray workers, in an order that lets nothing wait on what is gone: the
    plan's threads are told to stop, then the learner threads, the workers and the replay
    actors; last, the plan's threads are waited for (up to ``THREAD_JOIN_TIMEOUT_S``)."""
    results.stop()
    for learner in learners:
        learner.stop()
    workers.stop()
    if replay is not None:
        replay.stop()
    if not results.join(THREAD_JOIN_TIMEOUT_S):
        log.warning("some of the plan's background threads did not end within %.0f s", THREAD_JOIN_TIMEOUT_S)


def build_learner(
    config: Any,
    spec: AlgorithmSpec,
    spaces: tuple[gymnasium.Space, gymnasium.Space] | None = None,
    policy: Policy | None = None,
) -> tuple[Policy, Learner]:
    """The policy and a freshly initialised learner for ``config`` (no Ray needed), for the
    spaces of ``config.env`` or the given ``(observation, action)`` spaces; ``policy``
    replaces the algorithm's own (e.g. the same one with another convolution)."""
    policy, make_learner = learner_factory(config, spec, spaces, policy)
    return policy, make_learner()


def learner_factory(
    config: Any,
    spec: AlgorithmSpec,
    spaces: tuple[gymnasium.Space, gymnasium.Space] | None = None,
    policy: Policy | None = None,
) -> tuple[Policy, Callable[..., Learner]]:
    """:func:`build_learner`'s policy, and its learner still to be made: a picklable
    ``make_learner(devices=None)``, which a learner group calls in each of its processes."""
    if spec.loss is None:
        raise ConfigError(f"{spec.name} has no loss: it runs as its own program, not with a learner.")
    obs_space, action_space = spaces or env_spaces(config, spec)
    policy = policy or spec.policy(config, obs_space, action_space)
    params = jax.device_get(policy.init(jax.random.PRNGKey(config.seed)))
    num_epochs, minibatch_size = spec.learner.sgd(config)
    return policy, functools.partial(
        Learner,
        bind_loss(spec.loss, policy, config),
        learner_optimizer(spec.learner.optimizer(config), config),
        params,
        seed=config.seed,
        num_epochs=num_epochs,
        minibatch_size=minibatch_size,
        target_network=spec.learner.target_network,
        on_nonfinite=config.optimizer.on_nonfinite,
    )


def learner_placement(config: Any) -> Placement:
    """Where a learner group's processes go: ``num_cpus_per_learner`` each, by the rollout
    workers' ``placement_strategy``."""
    return Placement(num_cpus=config.num_cpus_per_learner, strategy=config.rollout.placement_strategy)


RAY_ADDRESS_VARIABLE = "RAY_ADDRESS"
"""The environment variable naming a Ray cluster to join (Ray's own); ``init_ray``'s ``address`` comes first."""
OWN_RAY = "local"
"""``ray.init``'s address for a new local Ray of this process's own."""
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_DEFAULT_NOTICE = re.compile(r"Token authentication is enabled for this Ray cluster\. Set RAY_AUTH_MODE=disabled")
"""Ray's warning, on every start of a local Ray, that its default (token authentication) is on."""


def _not_auth_default_notice(record: logging.LogRecord) -> bool:
    """Drops :data:`AUTH_DEFAULT_NOTICE` (a logging filter); Ray's other authentication messages,
    its errors and the warning that authentication is off, pass."""
    return not AUTH_DEFAULT_NOTICE.match(record.getMessage())


def needs_ray(config: Any, spec: AlgorithmSpec) -> bool:
    """Whether a run of ``spec``'s plan has anything outside the driver's process: rollout
    workers, a learner group, replay shard actors or an evaluation actor. A run with none of
    them (``num_workers=0``, its replay in the driver) never starts Ray."""
    return bool(
        config.rollout.num_workers
        or config.num_learners > 1
        or config.evaluation_interval
        or (spec.run.replay is not None and not replay_in_driver(config))
    )


def init_ray(address: str | None = None) -> str | None:
    """Starts Ray in this process, unless it is up: joins the cluster ``address`` names (``auto``:
    the one ``RAY_ADDRESS`` names, else the one running on this machine), else the one the
    ``RAY_ADDRESS`` environment variable names, else starts a local Ray of its own, never one
    found running on the machine (which Ray's own ``init()`` would join). Returns the cluster it
    joined (its address, nodes and CPUs, in words); None where it started its own, or Ray was up."""
    import ray

    # Ray starts its processes with subprocess (fork, then exec at once), and JAX's at-fork
    # hook warns about any fork once its threads run; nothing runs between the fork and the
    # exec, so the warning is noise (it reached every notebook that started Ray).
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    if ray.is_initialized():
        return None
    from_environment = os.environ.get(RAY_ADDRESS_VARIABLE) or None
    chosen = (from_environment if address in (None, "auto") else address) or address or OWN_RAY
    # Ray turns token authentication on for a new local Ray, its default, and says so on every start.
    logging.getLogger(RAY_AUTH_LOGGER).addFilter(_not_auth_default_notice)
    context = ray.init(address=chosen, include_dashboard=False, logging_level=logging.WARNING)
    python_sigterm_again()  # no stack dump of Ray's on SIGTERM (a notebook kernel's shutdown)
    if chosen == OWN_RAY:
        return None
    joined = getattr(context, "address_info", {}).get("gcs_address") or chosen
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    source = f" ({RAY_ADDRESS_VARIABLE})" if chosen == from_environment else ""
    return f"{joined}{source}: {nodes} node{'s' if nodes != 1 else ''}, {ray.cluster_resources().get('CPU', 0):g} CPUs"
