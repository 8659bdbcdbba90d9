"""Greedy evaluation on the host: a policy (or, in a multi-agent run, every policy for its
agents) plays its greedy actions for a number of episodes, and one summary of the returns."""

from __future__ import annotations

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


def evaluate_policy(
    config: Any,
    policy: Policy,
    params: Any,
    episodes: int,
    seed: int | None = None,
    normalizer: Normalizer | None = None,
    video_dir: str | None = None,
    kept: tuple[Any, tuple[Callable[..., Any], Callable[..., Any]]] | None = None,
) -> dict[str, Any]:
    """Mean and standard deviation of the greedy policy's return over ``episodes`` episodes
    of ``config.env``, stepped on the host; observations normalized with ``normalizer``'s
    statistics (fixed: evaluation counts nothing) where the run normalizes them. Returns are
    the environment's own rewards, never scaled. With ``video_dir``, each episode is also
    written there as ``episode_<k>.mp4`` (listed under ``videos``). Where ``config`` caps its
    episodes (ES's and ARS's ``max_episode_length``), an episode ends there too. ``kept``: an
    env of ``config.env`` and :func:`compiled_greedy`'s functions to play with (left open),
    which an :class:`Evaluator` keeps from call to call (each episode is reset with its seed)."""
    seed, owned = evaluation_seed(config, seed), None
    if kept is None:
        kept = (video_env(config, seed) if video_dir else make_env(config, seed)), compiled_greedy(policy)
        owned = kept[0]  # closed at the end
    env, (act, greedy_step) = kept
    returns, lengths, videos = [], [], []
    max_length = getattr(config, "max_episode_length", None)
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        if policy.recurrent:  # the state goes along within the episode, fresh for each
            act = recurrent_greedy(greedy_step, policy.initial_state(1))
        video = None
        if video_dir:
            video = EpisodeVideo(
                os.path.join(video_dir, f"episode_{e:03d}.mp4"), env.metadata.get("render_fps", DEFAULT_FPS)
            )
            video.add(env.render())
        done, total, n = False, 0.0, 0
        while not done:
            action = greedy_env_actions(config, policy, act, params, np.asarray(obs)[None], normalizer)[0]
            action = action.item() if action.ndim == 0 else action
            obs, r, terminated, truncated, _ = env.step(action)
            total, n = total + float(r), n + 1
            done = terminated or truncated or n == max_length
            if video is not None:
                video.add(env.render())
        if video is not None:
            video.close()
            videos.append(video.path)
        returns.append(total)
        lengths.append(n)
    if owned is not None:
        owned.close()
    return summarize_returns(returns, lengths=lengths, **({"videos": videos} if video_dir else {}))


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
        self._env: Any = None  # made on the first evaluation, kept with the compiled policy: a new
        # env and new jitted functions compiled anew each time (about 0.8 s of CPU a call)

    def evaluate(self, params: Any, episodes: int, seed: int, normalizer: Normalizer | None) -> dict[str, Any]:
        if self._env is None:
            self._env = make_env(self.config, evaluation_seed(self.config, seed))
        kept = (self._env, self._compiled)
        return evaluate_policy(self.config, self.policy, params, episodes, seed, normalizer, kept=kept)

    def node_id(self) -> str:
        """The Ray node this evaluator runs on."""
        return placement.node_id()
