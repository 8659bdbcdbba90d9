"""What a rollout worker steps with: its vector environments, the empty arrays of a fragment
it fills step by step, a stopwatch for its time in the envs and the policy, and the loop
stepping one fragment (:class:`FragmentLoop`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxflow import envs
from jaxflow.policies.policy import unpack
from jaxflow.policies.sequences import STARTS_FIELD, STATE_FIELD
from jaxflow.rollout.guards import check_finite_step
from jaxflow.rollout.truncation import bootstrap_truncations

if TYPE_CHECKING:
    from jaxflow.rollout.worker import RolloutWorker


class Stopwatch:
    """Adds up the seconds spent inside ``with`` blocks: a worker's time in its envs and in
    waits for the policy, for :class:`SampleTiming`.

    Example:
        >>> env_watch = Stopwatch()
        >>> with env_watch:
        ...     step = env.step(actions)  # doctest: +SKIP
        >>> env_watch.seconds  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds += time.perf_counter() - self._start


def vector_backend(config: Any) -> str:
    """What a rollout worker of ``config`` steps its envs with: ``config.rollout.vector_env``,
    where "auto" is ale-py's vector env ("ale") for the preprocessed ``ALE/<Game>-v5`` games and
    "python" for every other env. envpool is asked for by name: it was faster for classic
    control and MuJoCo (``benchmarks/vector_envs.py``), but its random numbers give other
    episodes for a seed than gymnasium's, and the learning tests and tuned examples' figures
    are not yet checked on it."""
    backend = config.rollout.vector_env
    if backend != "auto":
        return backend
    return "ale" if envs.runs_in_ale_vector(config.env, config.env_config) else "python"


def make_vector_envs(
    config: Any, seed: int, index: int = 0, incarnation: int = 0, num_groups: int | None = None
) -> list[Any]:
    """The vectors of environments a rollout worker of ``config`` steps: ``num_groups``
    (default ``config.rollout.num_env_groups``) groups splitting ``num_envs_per_worker`` envs, whose
    env ``i`` is seeded ``seed + i`` however they are grouped. ale-py's emulators and envpool's
    envs (see :func:`vector_backend`) run in ``num_cpus_per_worker`` threads (at least one) per
    group; Python steps gymnasium envs in the worker's own thread."""
    groups = config.rollout.num_env_groups if num_groups is None else num_groups
    n = config.rollout.num_envs_per_worker // groups
    threads = max(1, int(config.rollout.num_cpus_per_worker))
    threaded = {"ale": envs.ALEVectorEnv, "envpool": envs.EnvPoolVectorEnv}.get(vector_backend(config))
    if threaded is not None:
        return [
            threaded(config.env, n, seed + g * n, config.env_config, index, incarnation, threads) for g in range(groups)
        ]
    return [envs.VectorEnv(config.env, n, seed + g * n, config.env_config, index, incarnation) for g in range(groups)]


def empty_fragment(T: int, B: int, obs: np.ndarray, dist: Any, num_inputs: int) -> dict[str, np.ndarray]:
    """The per-step fields of a ``[T, B]`` fragment, to be filled step by step: observations
    like ``obs`` (``[B, ...]``), the distribution's actions and ``num_inputs`` inputs, and
    float32 log-probabilities, values, rewards and discounts."""
    return dict(  # in the order of the fields every fragment has had
        obs=np.empty((T, B) + obs.shape[1:], obs.dtype),
        actions=np.empty((T, B, *dist.action_shape), dist.action_dtype),
        logp=np.empty((T, B), np.float32),
        dist_inputs=np.empty((T, B, num_inputs), np.float32),
        values=np.empty((T, B), np.float32),
        rewards=np.empty((T, B), np.float32),
        discounts=np.empty((T, B), np.float32),
    )


class FragmentLoop:
    """One ``[T, B]`` fragment of ``worker``'s envs stepped with ``params``: :meth:`run` fills
    the fields of :func:`empty_fragment` (and a recurrent policy's ``policy_state`` and
    ``episode_starts``), adds ``bootstrap_value`` and ``last_obs``, and leaves the worker's
    current observations (and recurrent state) at the fragment's end. ``env_watch`` and
    ``policy_watch`` hold its time in the envs and in waits for the policy.

    Example:
        >>> import jax
        >>> from jaxflow import RolloutWorker, WorkerSpec, get_algorithm, make_config
        >>> from jaxflow.policies.build import actor_critic_policy
        >>> config = make_config(get_algorithm("PPO").config_cls, env="CartPole-v1", num_envs_per_worker=2,
        ...                      rollout_fragment_length=3)
        >>> env = envs.make_cpu("CartPole-v1")
        >>> policy = actor_critic_policy(config, env.observation_space, env.action_space)
        >>> worker = RolloutWorker(WorkerSpec(config, policy), index=0)
        >>> loop = FragmentLoop(worker, policy.init(jax.random.PRNGKey(0)))
        >>> traj = loop.run()
        >>> loop.steps, traj["rewards"].shape, traj["last_obs"].shape, bool(traj["last_obs"] is worker.current_obs[0])
        (6, (3, 2), (2, 4), True)
        >>> worker.close()
    """

    def __init__(self, worker: RolloutWorker, params: Any) -> None:
        cfg = worker.config
        # The worker's parts bound once per fragment: the step methods read them on every step.
        self.envs, self.params, self.normalizer = worker.envs, params, worker.normalizer
        self.current_obs, self.memory = worker.current_obs, worker.memory
        self._forward, self._act_forward = worker.forward, worker.act_forward
        self._choose, self._to_env = worker.choose_actions, worker.policy.distribution.to_env
        self._env_id, self._index, self._gamma = cfg.env, worker.index, cfg.gamma
        self._check_finite = cfg.rollout.check_finite
        self.T, n = cfg.rollout.rollout_fragment_length, self.envs[0].num_envs
        self.B = n * len(self.envs)
        self.steps = self.T * self.B
        self._cols = [slice(g * n, (g + 1) * n) for g in range(len(self.envs))]
        # The worker's env step of group g's first env at step t: first_step[g] + t * B.
        self._first_step = [worker.env_steps + g * n for g in range(len(self.envs))]
        self.env_watch, self.policy_watch = Stopwatch(), Stopwatch()
        self.out = [self.forward(g, o) for g, o in enumerate(self.current_obs)]
        self.frag = empty_fragment(
            self.T, self.B, self.current_obs[0], worker.policy.distribution, self.out[0].shape[1] - 1
        )
        if self.memory is not None:  # what the learner replays each sequence from
            self.frag[STATE_FIELD] = self.memory.fragment_start()
            self.frag[STARTS_FIELD] = np.empty((self.T, self.B), bool)

    def forward(self, g: int, obs: np.ndarray) -> Any:
        """Group ``g``'s packed policy outputs on ``obs``, dispatched (not waited for)."""
        return self._act_forward(self.params, obs) if self.memory is None else self.memory.forward(self.params, g, obs)

    def run(self) -> dict[str, np.ndarray]:
        """Steps the fragment; returns its fields."""
        # With several groups, one group's emulators run while the worker waits for the policy
        # on the next group and picks its actions (double buffering at two groups).
        groups = range(len(self.envs))
        for g in groups:
            self.act(g, 0)
        for t in range(self.T):
            for g in groups:
                self.collect(g, t)
                if t + 1 < self.T:
                    self.act(g, t + 1)
        with self.policy_watch:
            bootstrap_value = np.concatenate([unpack(o)[1] for o in self.out])
        obs = self.current_obs
        last_obs = obs[0] if len(obs) == 1 else np.concatenate(obs)
        return dict(self.frag, bootstrap_value=bootstrap_value, last_obs=last_obs)

    def act(self, g: int, t: int) -> None:
        """Group ``g`` acts at step ``t`` on its current observations: its envs start stepping."""
        # The copies into the fragment run while the group's emulators (ALE's threads) step.
        with self.policy_watch:
            inputs, v = unpack(self.out[g])
        a, lp = self._choose(inputs, v, self._first_step[g] + t * self.B)
        with self.env_watch:
            self.envs[g].step_async(self._to_env(a))
        frag, cols = self.frag, self._cols[g]
        frag["obs"][t, cols], frag["actions"][t, cols], frag["logp"][t, cols] = self.current_obs[g], a, lp
        frag["values"][t, cols], frag["dist_inputs"][t, cols] = v, inputs
        if self.memory is not None:
            frag[STARTS_FIELD][t, cols] = self.memory.starts[g]

    def collect(self, g: int, t: int) -> None:
        """Group ``g``'s step ``t`` ends: its rewards and discounts, and its next observations."""
        # The next forward pass is dispatched as soon as its observation exists, so on a GPU
        # it runs during the reward bookkeeping.
        with self.env_watch:
            step = self.envs[g].step_wait()
        if self._check_finite:
            check_finite_step(step.obs, step.reward, self._env_id, self._index, self._first_step[g] + t * self.B)
        next_obs = self.normalizer.observe(step.obs)
        done = step.terminated | step.truncated
        if self.memory is not None:
            self.memory.advance(g, done)
        self.out[g] = self.forward(g, next_obs)
        cols = self._cols[g]
        reward = self.normalizer.rewards(cols, step.reward, done)
        self.frag["rewards"][t, cols], self.frag["discounts"][t, cols] = bootstrap_truncations(
            reward, step.terminated, step.truncated, self._gamma, lambda: self.final_values(g, step.final_obs)
        )
        self.current_obs[g] = next_obs

    def final_values(self, g: int, final_obs: np.ndarray) -> np.ndarray:
        """``V`` of group ``g``'s ended episodes' final observations: what a truncation bootstraps from."""
        final_obs = self.normalizer.normalize(final_obs)
        with self.policy_watch:
            if self.memory is not None:  # from the state the ended episode reached
                return self.memory.final_values(self.params, g, final_obs)
            return unpack(self._forward(self.params, final_obs))[1]
