"""The rollout worker: steps its environments with the current policy and returns fragments."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxflow import envs
from jaxflow.config.constants import worker_seed
from jaxflow.dataflow import placement
from jaxflow.dataflow.iterators import _call
from jaxflow.envs.vector import EndedEpisodes
from jaxflow.policies.policy import Policy, compiled_acting, compiled_forward
from jaxflow.policies.sequences import STATE_FIELD
from jaxflow.rollout.batch import GradientsResult, SampleBatch, SampleTiming
from jaxflow.rollout.episode_hooks import EpisodeEnd, EpisodeMetrics, call_episode_hooks, episode_hooks
from jaxflow.rollout.guards import PolicyOutputError, bad_output_message
from jaxflow.rollout.memory import EnvMemory
from jaxflow.rollout.normalize import HostNormalizer, Normalizer
from jaxflow.rollout.postprocess import HostPostprocess
from jaxflow.rollout.sample_ahead import SampleAhead
from jaxflow.rollout.stepping import FragmentLoop, make_vector_envs


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """What a rollout worker needs: the algorithm's config, policy and pure functions.

    ``postprocess(traj, config) -> traj`` runs on the worker after sampling (e.g. GAE),
    compiled for the CPU with the fields it passes through kept out (:class:`HostPostprocess`);
    ``encode(traj, config)`` then runs in numpy on the host (e.g. packing replay rows);
    ``loss(params, batch, rng, *, policy, config)`` lets it compute gradients (A3C);
    ``explore(rng, dist_inputs, config, worker_index, env_steps) -> (actions, logp)`` picks
    actions in place of the policy's own host sampler (DQN: epsilon-greedy on Q-values).
    ``callbacks``: the run's callback objects; the worker calls the ``on_episode_end`` of those
    that have one for each episode that ends (:mod:`jaxflow.rollout.episode_hooks`).
    """

    config: Any
    policy: Policy
    postprocess: Callable[..., Any] | None = None
    loss: Callable[..., Any] | None = None
    encode: Callable[..., Any] | None = None
    explore: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None
    callbacks: tuple[Any, ...] = ()


class Rollout(NamedTuple):
    """A fragment as stepped, before the postprocess: what :class:`SampleBatch` is made of."""

    traj: dict[str, np.ndarray]
    env_steps: int
    returns: np.ndarray
    lengths: np.ndarray
    version: int
    timing: SampleTiming
    episode_metrics: EpisodeMetrics | None = None


class RolloutWorker:
    """Steps its environments with the current policy and returns fragments: one vector, or
    ``num_env_groups`` vectors stepped in turn (see :func:`make_vector_envs`).

    Used as a Ray actor (see :func:`jax_actor`) or in the driver when ``num_workers == 0``.
    """

    def __init__(self, spec: WorkerSpec, index: int, incarnation: int = 0, env_entry: Any = None):
        if env_entry is not None:  # an id registered in the driver only
            envs.adopt(env_entry)
        cfg = spec.config
        self.index, self.incarnation, self.config = index, incarnation, cfg
        seed = worker_seed(cfg.seed, index, incarnation)
        self.envs = make_vector_envs(cfg, seed, index, incarnation)
        self.policy = spec.policy
        self.forward = compiled_forward(spec.policy, seed)
        self.act_forward = compiled_acting(spec.policy, self.forward)
        """What the steps act with: :attr:`forward`, or the policy's inputs alone (SAC, TD3)."""
        self._postprocess = (
            HostPostprocess(functools.partial(spec.postprocess, config=cfg)) if spec.postprocess else None
        )
        self._grad = (
            jax.jit(jax.grad(functools.partial(spec.loss, policy=spec.policy, config=cfg), has_aux=True))
            if spec.loss
            else None
        )
        self._encode = spec.encode
        self._explore = spec.explore
        self._episode_hooks = episode_hooks(spec.callbacks)
        self._key = jax.random.PRNGKey(seed)
        self._rng = np.random.default_rng(seed)
        first = [env.reset() for env in self.envs]
        self.normalizer = HostNormalizer(cfg, first[0].shape[1:], sum(len(o) for o in first))
        self.current_obs = [self.normalizer.observe(o) for o in first]
        """Per group of envs: the observations the next fragment starts from."""
        self.memory = EnvMemory(self.policy, self.forward, [len(o) for o in first]) if self.policy.recurrent else None
        self.env_steps = 0
        # (params, version) as one value: a sampler thread reads both at once.
        self._weights: tuple[Any, int] = (None, -1)
        self._ahead = SampleAhead(self._rollout) if cfg.rollout.sample_async else None

    @property
    def params(self) -> Any:
        return self._weights[0]

    @property
    def weights_version(self) -> int:
        return self._weights[1]

    def ping(self) -> int:
        return self.index

    def node_id(self) -> str:
        """The Ray node this worker runs on."""
        return placement.node_id()

    def set_weights(self, weights: Any, version: int) -> None:
        self._weights = (jax.device_put(weights), version)

    def pop_normalizer(self) -> Normalizer | None:
        """The normalizer statistics of the samples seen since the last call (for the driver to merge)."""
        return self.normalizer.pop_delta()

    def set_normalizer(self, stats: Normalizer) -> None:
        """The run's normalizer statistics, merged on the driver."""
        self.normalizer.set_stats(stats)

    def sample(self) -> SampleBatch:
        """One fragment ``[T, B]``: obs, actions, logp, dist_inputs (the policy's distribution
        inputs), values, rewards, discounts, plus ``bootstrap_value`` and ``last_obs`` ``[B]``
        after the last step.

        A truncated episode's last reward gets ``gamma * V(final_obs)`` added and its
        discount set to 0, so returns bootstrap from the value on a time limit but
        not on a real termination, and learners need no extra field for it.

        A recurrent policy's fragment also holds ``episode_starts [T, B]`` and
        ``policy_state``, each env's state at the first step (see :class:`EnvMemory`); its
        values, bootstrap value and truncation values read the state each episode reached.

        With ``sample_async`` the fragment was stepped by a background thread, which starts
        on the next one before this one is postprocessed, encoded and returned; its
        ``timing`` is then the thread's.
        """
        if self.params is None:
            raise RuntimeError(f"rollout worker {self.index}: sample() before set_weights()")
        start = time.perf_counter()
        rollout = self._rollout() if self._ahead is None else self._ahead.take()
        traj = dict(rollout.traj)
        state = traj.pop(STATE_FIELD, None)  # a pytree the postprocess only passes on
        if self._postprocess is not None:
            traj = self._postprocess(traj)
        if self._encode is not None:
            traj = self._encode(traj, self.config)
        if state is not None:
            traj[STATE_FIELD] = state
        timing = rollout.timing
        if self._ahead is None:  # postprocessing included
            timing = timing._replace(sample_s=time.perf_counter() - start)
        return SampleBatch(
            traj, rollout.env_steps, rollout.returns, rollout.lengths, rollout.version, timing, rollout.episode_metrics
        )

    def _rollout(self) -> Rollout:
        """Steps the envs for one fragment with the weights in hand when it starts."""
        params, version = self._weights
        start = time.perf_counter()
        loop = FragmentLoop(self, params)
        traj = loop.run()
        self.env_steps += loop.steps
        ended = [env.pop_ended() for env in self.envs]
        returns, lengths = np.concatenate([e.returns for e in ended]), np.concatenate([e.lengths for e in ended])
        metrics = self._call_episode_hooks(ended) if self._episode_hooks else None
        timing = SampleTiming(time.perf_counter() - start, loop.env_watch.seconds, loop.policy_watch.seconds)
        return Rollout(traj, loop.steps, returns, lengths, version, timing, metrics)

    def _call_episode_hooks(self, ended: Sequence[EndedEpisodes]) -> EpisodeMetrics | None:
        """The callbacks' ``on_episode_end`` on each episode of the fragment's groups of envs
        (``ended``, group by group), an env's index counted across the worker's groups."""
        width = self.envs[0].num_envs
        episodes = [
            EpisodeEnd(self.index, g * width + int(env), float(r), int(n), info)
            for g, group in enumerate(ended)
            for r, n, env, info in zip(group.returns, group.lengths, group.env_indices, group.infos)
        ]
        return call_episode_hooks(self._episode_hooks, episodes) or None

    def choose_actions(self, inputs: np.ndarray, values: np.ndarray, env_step: int) -> tuple[np.ndarray, np.ndarray]:
        """Actions and their log-probabilities for a group of envs from the policy's outputs on
        them, the first of them at the worker's ``env_step``: the policy's own host sampler, or
        the algorithm's ``explore``. Raises :class:`PolicyOutputError` on a non-finite output."""
        if not (np.isfinite(inputs).all() and np.isfinite(values).all()):
            cfg = self.config
            model = f"model {cfg.model!r}" if cfg.model else "the default network"
            raise PolicyOutputError(
                bad_output_message(inputs, values, self.index, model, cfg.env, env_step, cfg.rollout.check_finite)
            )
        if self._explore is None:
            return self.policy.distribution.sample_host(self._rng, inputs)
        return self._explore(self._rng, inputs, self.config, self.index, env_step)

    def close(self) -> None:
        """Stops the sampler thread (``sample_async``) and the environments."""
        if self._ahead is not None:
            self._ahead.close()
        for env in self.envs:
            env.close()

    def compute_gradients(self, batch: SampleBatch) -> GradientsResult:
        """Gradients of the algorithm's loss on ``batch`` at the worker's current weights."""
        if self._grad is None:
            raise RuntimeError(f"rollout worker {self.index}: compute_gradients() needs a WorkerSpec with the loss")
        self._key, key = jax.random.split(self._key)
        grads, metrics = self._grad(self.params, batch.train_arrays(), key)
        grads, metrics = jax.device_get((grads, metrics))
        return GradientsResult(
            grads,
            {k: float(v) for k, v in metrics.items()},
            batch.env_steps,
            batch.episode_returns,
            batch.episode_lengths,
            batch.weights_version,
            batch.timing,
            batch.episode_metrics,
        )

    def run_chain(self, method: str, fns: Sequence[Callable[..., Any]]) -> Any:
        """Calls ``method`` then ``fns`` in order on its result: ``par_for_each`` on the actor side."""
        item = getattr(self, method)()
        for fn in fns:
            item = _call(fn, item, self)
        return item
