"""Greedy evaluation on the host: a policy (or, in a multi-agent run, every policy for its
agents) plays its greedy actions for a number of episodes, and one summary of the returns."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxflow import envs
from jaxflow.config.constants import EVALUATION_SEED_OFFSET
from jaxflow.dataflow import placement
from jaxflow.policies.policy import Policy
from jaxflow.rollout.normalize import Normalizer, normalize_observations
from jaxflow.rollout.video import DEFAULT_FPS, EpisodeVideo, video_env

log = logging.getLogger(__name__)


def evaluation_seed(config: Any, seed: int | None) -> int:
    """``seed``, or by default one apart from every seed training used."""
    return config.seed + EVALUATION_SEED_OFFSET if seed is None else seed


def summarize_returns(returns: Sequence[float], **extra: Any) -> dict[str, Any]:
    """Every evaluator's result: episodes, mean and standard deviation of the return, the returns."""
    r = np.asarray(returns, np.float64)
    return {
        "episodes": len(r),
        "return_mean": float(r.mean()),
        "return_std": float(r.std()),
        "returns": r.tolist(),
        **extra,
    }


def greedy_env_actions(
    config: Any, policy: Policy, act: Any, params: Any, observations: Any, normalizer: Normalizer | None
) -> np.ndarray:
    """The greedy actions for a batch of observations ``[B, *obs]``, as the env takes them
    (a Box's actions rescaled to its bounds); ``act`` is ``policy.greedy``, compiled once by the
    caller, and the observations are normalized with ``normalizer``'s statistics where the run
    normalizes them."""
    x = np.asarray(observations, np.float32)
    if normalizer is not None and normalizer.obs is not None:
        x = normalize_observations(normalizer.obs, x, config.rollout.normalize_clip)
    return policy.distribution.to_env(np.asarray(act(params, x)))


def recurrent_greedy(step: Callable[..., Any], state: Any) -> Callable[[Any, Any], Any]:
    """``act(params, obs)`` of a recurrent policy for one new episode from ``state``: greedy
    actions by ``step`` (the policy's compiled ``greedy_step``), the state carried from call to call."""

    def act(params: Any, obs: Any) -> Any:
        nonlocal state
        state, actions = step(params, state, obs)
        return actions

    return act


def compiled_greedy(policy: Policy) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``policy.greedy`` and ``policy.greedy_step`` jitted, what :func:`evaluate_policy` acts with."""
    return jax.jit(policy.greedy), jax.jit(policy.greedy_step)


EVALUATION_BATCH = 16
"""Episodes an evaluation plays side by side, one forward pass a step for all of them: the
forward pass, not the env, is most of a greedy CartPole step on the host."""


EVALUATION_STEP_LIMIT = 100_000
"""Steps after which a greedy evaluation episode is cut where neither the env's time limit nor
the config's ``max_episode_length`` ends it sooner: a policy that balances an env without a
time limit would otherwise play forever."""


def episode_limit(config: Any, env: Any) -> int:
    """The steps an evaluation episode of ``env`` may last: ``config``'s ``max_episode_length``
    where it has one, else :data:`EVALUATION_STEP_LIMIT` or the env's own longer time limit."""
    own = getattr(config, "max_episode_length", None)
    if own:
        return int(own)
    return max(EVALUATION_STEP_LIMIT, getattr(getattr(env, "spec", None), "max_episode_steps", None) or 0)


def evaluate_policy(
    config: Any,
    policy: Policy,
    params: Any,
    episodes: int,
    seed: int | None = None,
    normalizer: Normalizer | None = None,
    video_dir: str | None = None,
    kept: tuple[list[Any], tuple[Callable[..., Any], Callable[..., Any]]] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Mean and standard deviation of the greedy policy's return over ``episodes`` episodes
    of ``config.env``, stepped on the host, up to :data:`EVALUATION_BATCH` side by side (episode
    ``e`` is reset with seed ``seed + e`` whatever the batch); observations normalized with
    ``normalizer``'s statistics (fixed: evaluation counts nothing) where the run normalizes
    them. Returns are the environment's own rewards, never scaled. With ``video_dir``, each
    episode is also written there as ``episode_<k>.mp4`` (listed under ``videos``), one episode
    at a time. Where ``config`` caps its episodes (ES's and ARS's ``max_episode_length``), an
    episode ends there too; otherwise an episode that has not ended after :func:`episode_limit`
    steps is cut there, with a warning (the env has no time limit). ``kept``: envs of ``config.env`` (a list this call adds to where it
    needs more) and :func:`compiled_greedy`'s functions to play with, left open, which an
    :class:`Evaluator` keeps from call to call. ``progress`` is called with the number of
    episodes played so far after each batch of them."""
    seed = evaluation_seed(config, seed)
    pool, compiled = kept if kept is not None else ([], compiled_greedy(policy))
    batch = 1 if video_dir else max(1, min(episodes, EVALUATION_BATCH))
    while len(pool) < batch:
        pool.append((video_env if video_dir else make_env)(config, seed + len(pool)))
    returns: list[float] = []
    lengths: list[int] = []
    videos: list[str] = []
    for first in range(0, episodes, batch):  # the last batch's spare envs sit out: one compiled batch size
        seeds = list(range(seed + first, seed + min(first + batch, episodes)))
        video = None
        if video_dir:
            fps = pool[0].metadata.get("render_fps", DEFAULT_FPS)
            video = EpisodeVideo(os.path.join(video_dir, f"episode_{first:03d}.mp4"), fps)
            videos.append(video.path)
        r, n = play_greedy(config, policy, compiled, params, pool[:batch], seeds, normalizer, video)
        returns, lengths = returns + r, lengths + n
        if progress is not None:  # told the episodes played so far (jaxflow evaluate's progress line)
            progress(len(returns))
    _warn_cut(config, pool[0], lengths)
    if kept is None:
        for env in pool:
            env.close()
    return summarize_returns(returns, lengths=lengths, **({"videos": videos} if video_dir else {}))


def _warn_cut(config: Any, env: Any, lengths: Sequence[int]) -> None:
    if getattr(config, "max_episode_length", None) or getattr(getattr(env, "spec", None), "max_episode_steps", None):
        return  # episodes end where the config or the env's own time limit says
    limit = episode_limit(config, env)
    cut = sum(n >= limit for n in lengths)
    if cut:
        log.warning(
            "evaluation: %d of %d episodes of %s ran %d steps without ending and were cut there "
            "(the env has no time limit; register it with max_episode_steps to set one)",
            cut,
            len(lengths),
            config.env,
            limit,
        )


def play_greedy(
    config: Any,
    policy: Policy,
    compiled: tuple[Callable[..., Any], Callable[..., Any]],
    params: Any,
    pool: Sequence[Any],
    seeds: Sequence[int],
    normalizer: Normalizer | None,
    video: EpisodeVideo | None = None,
) -> tuple[list[float], list[int]]:
    """One episode in each of the first ``len(seeds)`` envs of ``pool`` (reset with those seeds),
    played greedily to its end: their returns and lengths. Every env of ``pool`` is in each
    forward pass (the spare ones with a copy of the first's observation, never stepped), so the
    compiled batch size does not change. ``video`` records the first env's episode."""
    act, greedy_step = compiled
    if policy.recurrent:  # the state goes along within the episodes, fresh for each
        act = recurrent_greedy(greedy_step, policy.initial_state(len(pool)))
    obs = [np.asarray(env.reset(seed=s)[0]) for env, s in zip(pool, seeds)]
    obs += [obs[0]] * (len(pool) - len(seeds))
    if video is not None:
        video.add(pool[0].render())
    totals, lengths = np.zeros(len(seeds)), np.zeros(len(seeds), np.int64)
    playing = np.ones(len(seeds), bool)
    max_length = episode_limit(config, pool[0])
    while playing.any():
        actions = greedy_env_actions(config, policy, act, params, np.stack(obs), normalizer)
        for i in np.flatnonzero(playing).tolist():
            action = actions[i].item() if actions[i].ndim == 0 else actions[i]
            o, r, terminated, truncated, _ = pool[i].step(action)
            obs[i], totals[i], lengths[i] = np.asarray(o), totals[i] + float(r), lengths[i] + 1
            playing[i] = not (terminated or truncated or lengths[i] == max_length)
            if video is not None and i == 0:
                video.add(pool[0].render())
    if video is not None:
        video.close()
    return totals.tolist(), lengths.tolist()


def make_env(config: Any, seed: int) -> Any:
    """One env of ``config.env`` on the host, to evaluate in."""
    return envs.make_cpu(config.env, envs.EnvContext(seed=seed), **config.env_config)


def evaluate_policies(
    config: Any,
    policies: Mapping[str, Policy],
    params: Mapping[str, Any],
    mapping: Mapping[str, str],
    episodes: int,
    seed: int | None = None,
) -> dict[str, Any]:
    """A multi-agent run's :func:`evaluate_policy`: every policy acting greedily for its agents
    (``mapping``: agent -> policy) in ``episodes`` episodes of ``config.env``. The return of an
    episode is summed over its agents; ``policies`` in the result holds each policy's mean
    return per agent."""
    env = envs.MultiAgentVectorEnv(config.env, 1, evaluation_seed(config, seed), config.env_config)
    act = {pid: jax.jit(policy.greedy) for pid, policy in policies.items()}
    obs = env.reset()
    ended_returns: list[np.ndarray] = []
    while len(ended_returns) < episodes:
        actions = {
            a: policies[pid].distribution.to_env(np.asarray(act[pid](params[pid], obs[a])))
            for a, pid in mapping.items()
        }
        obs = env.step(actions).obs
        ended = env.pop_episodes()
        if len(ended[env.agents[0]][0]):
            ended_returns.append(np.stack([ended[a][0] for a in env.agents]))  # [agents, episodes ended]
    env.close()
    per_agent = np.concatenate(ended_returns, axis=1)[:, :episodes]
    by_policy = {
        pid: float(np.mean([per_agent[i] for i, a in enumerate(env.agents) if mapping[a] == pid])) for pid in policies
    }
    return summarize_returns(per_agent.sum(axis=0), policies=by_policy)


class Evaluator:
    """Greedy evaluation in a process of its own (a Ray actor), so that training goes on
    while it plays.

    Example:
        >>> actor = jax_actor(Evaluator, num_cpus=0).remote(config, policy, None)   # doctest: +SKIP
        >>> ray.get(actor.evaluate.remote(params, 10, seed, None))["return_mean"]  # doctest: +SKIP
    """

    def __init__(self, config: Any, policy: Policy, env_entry: Any = None):
        if env_entry is not None:  # an env registered in the driver only
            envs.adopt(env_entry)
        self.config, self.policy = config, policy
        self._compiled = compiled_greedy(policy)
        self._envs: list[Any] = []  # made on the first evaluation, kept with the compiled policy: new
        # envs and new jitted functions compiled anew each time (about 0.8 s of CPU a call)

    def evaluate(self, params: Any, episodes: int, seed: int, normalizer: Normalizer | None) -> dict[str, Any]:
        kept = (self._envs, self._compiled)
        return evaluate_policy(self.config, self.policy, params, episodes, seed, normalizer, kept=kept)

    def node_id(self) -> str:
        """The Ray node this evaluator runs on."""
        return placement.node_id()
