"""Action masking: a Dict observation's ``action_mask`` flattened last, and a masked policy
that never samples, scores, plays greedily or bootstraps from an illegal action.

Illegal actions get the highest raw logits or Q-values throughout, so every test fails if the
mask is ignored anywhere on its path.
"""

from __future__ import annotations

import pickle
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from jaxflow import ConfigError, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config
from jaxflow.algorithms.dqn import DQNConfig, epsilon_greedy, loss
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.algorithms.ppo import loss as ppo_loss
from jaxflow.api import check_spaces, env_spaces
from jaxflow.envs.masking import masked_space
from jaxflow.policies import (
    MASKED_LOGIT,
    Categorical,
    Greedy,
    Policy,
    distribution_for,
    legal_inputs,
    mask_inputs,
    q_value_outputs,
    sample_categorical,
)

DRAWS = 100_000
# Raw logits of 4 actions; actions 2 (the largest logit) and 3 are illegal. The legal ones'
# softmax is (1, 3) / 4 since log 3 - 0 = log 3.
LOGITS = np.array([0.0, np.log(3.0), 5.0, 4.0], np.float32)
LEGAL = np.array([True, True, False, False])
LEGAL_PROBS = np.array([0.25, 0.75])
MASKED_CHOICE = "jaxflow/MaskedChoice-v0"


def masked_rows(n: int) -> np.ndarray:
    return np.asarray(mask_inputs(jnp.tile(LOGITS, (n, 1)), jnp.tile(LEGAL, (n, 1))))


def assert_legal_frequencies(actions: np.ndarray) -> None:
    """No illegal draw, and each legal action within 5 standard deviations of its probability."""
    assert set(np.unique(actions).tolist()) <= {0, 1}
    freq = np.bincount(actions, minlength=4)[:2] / len(actions)
    sd = np.sqrt(LEGAL_PROBS * (1 - LEGAL_PROBS) / len(actions))
    assert np.all(np.abs(freq - LEGAL_PROBS) < 5 * sd), freq


def test_masked_actions_are_never_drawn_on_the_host_or_in_jax():
    inputs = masked_rows(DRAWS)
    host, host_logp = sample_categorical(np.random.default_rng(0), inputs)
    assert_legal_frequencies(host)
    np.testing.assert_allclose(host_logp, np.log(LEGAL_PROBS)[host], rtol=1e-5)
    jax_actions, jax_logp = Categorical(4).sample(jax.random.PRNGKey(0), jnp.asarray(inputs))
    assert_legal_frequencies(np.asarray(jax_actions))
    np.testing.assert_allclose(np.asarray(jax_logp), np.log(LEGAL_PROBS)[np.asarray(jax_actions)], rtol=1e-5)


def test_illegal_actions_have_probability_zero_and_entropy_is_the_legal_ones():
    inputs = jnp.asarray(masked_rows(1))
    dist = Categorical(4)
    logp = np.asarray([dist.log_prob(inputs, jnp.array([a]))[0] for a in range(4)])
    assert np.all(np.exp(logp[2:]) == 0.0)
    np.testing.assert_allclose(np.exp(logp[:2]), LEGAL_PROBS, rtol=1e-6)
    # Hand-checked: -(0.25 log 0.25 + 0.75 log 0.75) = 0.562335.
    assert float(dist.entropy(inputs)[0]) == pytest.approx(0.562335, abs=1e-6)
    assert np.isfinite(np.asarray(jax.grad(lambda x: dist.entropy(x).sum())(inputs))).all()


# A policy on a linear network (anything with ``apply`` serves): the logits of obs
# [x_0..x_3, mask_0..mask_3] are x itself, the value is sum(x); the mask is the last 4 entries.
def linear_apply(params, obs):
    return obs[:, :4] * params["scale"], obs[:, :4].sum(-1)


MASKED_POLICY = Policy(types.SimpleNamespace(apply=linear_apply), Categorical(4), (8,), action_mask=True)
PARAMS = {"scale": jnp.float32(1.0)}
OBS = np.concatenate([LOGITS, LEGAL.astype(np.float32)])[None]


def test_the_policy_masks_what_the_loss_sees_and_plays_the_best_legal_action_greedily():
    inputs, _ = MASKED_POLICY.apply(PARAMS, jnp.asarray(OBS))
    assert np.asarray(inputs)[0, 2:].tolist() == [MASKED_LOGIT, MASKED_LOGIT]
    assert int(MASKED_POLICY.greedy(PARAMS, jnp.asarray(OBS))[0]) == 1  # not 2, the largest raw logit
    # PPO's loss on a batch of the legal action 1: finite, its entropy the legal one, finite gradients.
    batch = dict(
        obs=jnp.asarray(OBS),
        actions=jnp.array([1]),
        logp=jnp.log(jnp.array([0.75])),
        advantages=jnp.array([1.0]),
        values=jnp.array([0.0]),
        value_targets=jnp.array([0.0]),
    )
    cfg = make_config(PPOConfig, env="CartPole-v1")
    total, metrics = ppo_loss(PARAMS, batch, None, policy=MASKED_POLICY, config=cfg)
    assert np.isfinite(float(total))
    assert float(metrics["entropy"]) == pytest.approx(0.562335, abs=1e-6)
    assert float(metrics["approx_kl"]) == pytest.approx(0.0, abs=1e-6)  # the behaviour logp was the masked one
    grads = jax.grad(lambda p: ppo_loss(p, batch, None, policy=MASKED_POLICY, config=cfg)[0])(PARAMS)
    assert np.isfinite(float(grads["scale"]))


def test_a_policy_without_a_mask_is_unchanged_and_a_mask_needs_one_discrete_action():
    plain = Policy(types.SimpleNamespace(apply=linear_apply), Categorical(4), (8,))
    assert int(plain.greedy(PARAMS, jnp.asarray(OBS))[0]) == 2
    with pytest.raises(TypeError, match="Discrete"):
        Policy(
            types.SimpleNamespace(apply=linear_apply), distribution_for(spaces.Box(-1, 1, (4,))), (8,), action_mask=True
        )


def q_table_apply(params, obs):
    """Q-values read from the observation's first 3 entries (mask: the last 3)."""
    del params
    return obs[:, :3]


Q_POLICY = Policy(types.SimpleNamespace(apply=q_table_apply), Greedy(3), (6,), q_value_outputs, action_mask=True)


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_targets_take_the_max_over_legal_next_actions(double_q):
    # s: Q = (1, 2, 0), action 1 taken; s': Q = (5, 2, 9) with action 2 illegal, so the
    # bootstrap is 5 (not 9): td = r + discount * 5 - Q(s, 1) = 1 + 0.5 * 5 - 2 = 1.5.
    batch = dict(
        obs=np.array([[1.0, 2.0, 0.0, 1.0, 1.0, 1.0]], np.float32),
        next_obs=np.array([[5.0, 2.0, 9.0, 1.0, 1.0, 0.0]], np.float32),
        actions=np.array([1], np.int32),
        rewards=np.array([1.0], np.float32),
        discounts=np.array([0.5], np.float32),
        weights=np.ones(1, np.float32),
    )
    cfg = make_config(DQNConfig, env="CartPole-v1", double_q=double_q)
    _, metrics = loss({}, batch, None, {}, policy=Q_POLICY, config=cfg)
    assert float(metrics["td_error"][0]) == pytest.approx(1.5)
    assert float(metrics["mean_q"]) == pytest.approx(2.0)  # Q of the replayed action
    # The policy's value (a truncation's bootstrap) is the legal max too, 0 with no legal action.
    _, value = Q_POLICY.apply({}, jnp.asarray(np.concatenate([batch["next_obs"], [[5.0, 2, 9, 0, 0, 0]]])))
    assert np.asarray(value).tolist() == [5.0, 0.0]


def test_epsilon_greedy_explores_among_legal_actions_only():
    inputs = np.asarray(Q_POLICY.apply({}, jnp.asarray(np.tile([[1.0, 2.0, 9.0, 1, 1, 0]], (DRAWS, 1))))[0])
    assert legal_inputs(inputs[:1]).tolist() == [[True, True, False]]
    actions, _ = epsilon_greedy(np.random.default_rng(0), inputs, 1.0)
    freq = np.bincount(actions, minlength=3) / DRAWS
    assert freq[2] == 0.0
    assert abs(freq[0] - 0.5) < 5 * np.sqrt(0.25 / DRAWS)
    greedy, _ = epsilon_greedy(np.random.default_rng(0), inputs[:10], 0.0)
    assert greedy.tolist() == [1] * 10


def test_a_dict_with_an_action_mask_is_flattened_with_the_mask_last():
    env = envs.make_cpu(MASKED_CHOICE)
    space = env.observation_space
    assert isinstance(space, envs.MaskedBox) and space.num_actions == 6 and space.shape == (13,)
    obs, _ = env.reset(seed=0)
    raw, _ = envs.MaskedChoice().reset(seed=0)
    np.testing.assert_array_equal(obs, np.concatenate([raw["observation"], raw["action_mask"]]))
    assert pickle.loads(pickle.dumps(space)).num_actions == 6  # it travels to Ray workers


def masked_worker(algorithm: str, env_id: str, **settings) -> tuple[Policy, RolloutWorker]:
    """A rollout worker (in this process) of ``algorithm``'s policy for ``env_id``, built as a run
    builds it from the env's spaces, with fresh weights and the algorithm's exploration."""
    spec = get_algorithm(algorithm)
    config = make_config(spec.config_cls, env=env_id, num_workers=0, **settings)
    policy = spec.policy(config, *env_spaces(config, spec))
    worker = RolloutWorker(WorkerSpec(config, policy, explore=spec.workers.explore), index=0)
    worker.set_weights(policy.init(jax.random.PRNGKey(0)), 0)
    return policy, worker


@pytest.mark.parametrize("algorithm", ["PPO", "DQN"])
def test_workers_of_a_masked_env_act_legally(algorithm):
    """Sampling (PPO) and epsilon-greedy exploration (DQN, epsilon 1 at the start) on an env
    that raises on an illegal move; every recorded action is legal under its observation's mask."""
    policy, worker = masked_worker(algorithm, "test/StrictMasks-v0", num_envs_per_worker=4, rollout_fragment_length=25)
    assert policy.action_mask and pickle.loads(pickle.dumps(policy)).action_mask  # as Ray workers get it
    frag = worker.sample().data
    masks, actions = frag["obs"][..., -6:], frag["actions"]
    assert np.take_along_axis(masks, actions[..., None], axis=-1).min() == 1.0
    assert np.all(frag["dist_inputs"][masks == 0] == MASKED_LOGIT)
    worker.close()
    spec = get_algorithm(algorithm)  # the same spaces without the mask make an unmasked policy
    assert not spec.policy(worker.config, spaces.Box(0, 1, (13,)), spaces.Discrete(6)).action_mask


def masked_box(mask: spaces.Space) -> envs.MaskedBox:
    """The flat space of a Dict of 2 features and ``mask``."""
    return masked_space(spaces.Dict({"observation": spaces.Box(0.0, 1.0, (2,)), "action_mask": mask}))


def test_masks_of_other_action_spaces_or_lengths_are_refused_by_name():
    ppo = get_algorithm("PPO")
    check_spaces(ppo, "my/Game-v0", masked_box(spaces.Box(0, 1, (3,), np.int8)), spaces.Discrete(3))
    with pytest.raises(ConfigError, match=r"'my/Game-v0'.*Discrete action spaces only.*MultiDiscrete"):
        check_spaces(ppo, "my/Game-v0", masked_box(spaces.MultiBinary(3)), spaces.MultiDiscrete([3, 3]))
    with pytest.raises(ConfigError, match=r"'my/Game-v0'.*MultiBinary\(4\)"):
        check_spaces(ppo, "my/Game-v0", masked_box(spaces.MultiBinary(3)), spaces.Discrete(4))


def test_a_mask_with_no_legal_action_is_an_error_naming_the_env():
    venv = envs.VectorEnv("test/NoLegalAction-v0", num_envs=2, seed=0)
    obs = venv.step(venv.reset()[:, -6:].argmax(-1)).obs  # the first legal action of each env
    with pytest.raises(envs.ActionMaskError, match=r"'test/NoLegalAction-v0'.*no legal action.*step 2"):
        venv.step(obs[:, -6:].argmax(-1))
    # The last observation of an episode may have none: the game is over.
    env = envs.make_cpu("test/NoLegalAction-v0", at_step=1)
    obs, _ = env.reset(seed=0)
    illegal = int(np.flatnonzero(obs[-6:] == 0)[0])
    assert env.step(illegal)[2]  # terminated, no error


def test_a_worker_on_an_env_with_no_legal_action_fails_naming_it():
    _, worker = masked_worker("PPO", "test/NoLegalAction-v0", num_envs_per_worker=1, rollout_fragment_length=4)
    with pytest.raises(envs.ActionMaskError, match="'test/NoLegalAction-v0'"):
        worker.sample()
    worker.close()


def test_a_masked_env_refuses_observation_normalization():
    spec = get_algorithm("PPO")
    config = make_config(spec.config_cls, env="jaxflow/MaskedChoice-v0", normalize_observations=True)
    with pytest.raises(
        ConfigError, match="'jaxflow/MaskedChoice-v0' gives an action_mask, which normalize_observations"
    ):
        env_spaces(config, spec)
