"""The Policy part: distributions against independent references, and a toy distribution
defined here that acts on a rollout worker and in device mode with matching log-probs."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import distrax
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxflow import Algorithm, RolloutWorker, WorkerSpec, envs, get_algorithm, make_config, register_algorithm
from jaxflow.networks.mlp import MLPActorCritic, MLPQNetwork
from jaxflow.ondevice.rollout import EnvCarry, rollout
from jaxflow.policies import Categorical, Greedy, Policy, q_value_outputs, unpack


@dataclasses.dataclass(frozen=True)
class UniformMixture:
    """A toy distribution: softmax(logits) mixed with the uniform distribution,
    ``p(a) = (1 - eps) softmax(logits)_a + eps / A``. It is not a categorical over the
    logits, so any code path that ignores the policy's distribution gets other log-probs."""

    num_actions: int
    eps: float = 0.5
    action_shape: ClassVar[tuple[int, ...]] = ()
    action_dtype: ClassVar[Any] = np.int32
    num_free_inputs: ClassVar[int] = 0

    @property
    def num_inputs(self):
        return self.num_actions

    def to_env(self, actions):
        return actions

    def _probs(self, inputs):
        return (1 - self.eps) * jax.nn.softmax(inputs) + self.eps / self.num_actions

    def sample(self, key, inputs):
        actions = jax.random.categorical(key, jnp.log(self._probs(inputs))).astype(jnp.int32)
        return actions, self.log_prob(inputs, actions)

    def log_prob(self, inputs, actions):
        return jnp.log(jnp.take_along_axis(self._probs(inputs), actions[:, None], axis=-1)[:, 0])

    def entropy(self, inputs):
        p = self._probs(inputs)
        return -(p * jnp.log(p)).sum(-1)

    def mode(self, inputs):
        return jnp.argmax(inputs, axis=-1).astype(jnp.int32)

    def sample_host(self, rng, inputs):
        z = np.exp(inputs - inputs.max(-1, keepdims=True))
        p = (1 - self.eps) * z / z.sum(-1, keepdims=True) + self.eps / self.num_actions
        u = rng.random((len(p), 1))
        actions = np.minimum((np.cumsum(p, -1) < u).sum(-1), self.num_actions - 1).astype(np.int32)
        return actions, np.log(p[np.arange(len(p)), actions]).astype(np.float32)

    def to_distrax(self, inputs):
        return distrax.Categorical(probs=self._probs(inputs))


def toy_policy(config: Any, obs_space: gymnasium.Space, action_space: gymnasium.Space) -> Policy:
    n = int(action_space.n)
    return Policy(MLPActorCritic(n, (16,)), UniformMixture(n), tuple(obs_space.shape))


A2C = get_algorithm("A2C")
TOY = register_algorithm(
    dataclasses.replace(
        A2C,
        name="TOYMIXTURE",
        policy=toy_policy,
        config_cls=type("ToyMixtureConfig", (A2C.config_cls,), {"__module__": __name__}),
    )
)


def chi_square_same(a: np.ndarray, b: np.ndarray, k: int) -> float:
    table = np.stack([np.bincount(a, minlength=k), np.bincount(b, minlength=k)])
    return float(stats.chi2_contingency(table).pvalue)


def test_categorical_matches_distrax_and_its_host_sampler_follows_softmax():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)) * 2, jnp.float32)
    dist, ref = Categorical(4), distrax.Categorical(logits=logits)
    actions = jnp.asarray([0, 1, 2, 3, 1, 0], jnp.int32)
    np.testing.assert_allclose(dist.log_prob(logits, actions), ref.log_prob(actions), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dist.entropy(logits), ref.entropy(), rtol=1e-6)
    np.testing.assert_array_equal(dist.mode(logits), np.argmax(np.asarray(logits), -1))
    a, logp = dist.sample(jax.random.PRNGKey(1), logits)
    np.testing.assert_allclose(logp, ref.log_prob(a), rtol=1e-6, atol=1e-6)
    # Host and JAX samplers draw from the same distribution (chi-square, 0.1% level).
    row = np.repeat(np.asarray(logits[:1]), 20_000, axis=0)
    host, _ = dist.sample_host(np.random.default_rng(2), row)
    device, _ = dist.sample(jax.random.PRNGKey(3), jnp.asarray(row))
    assert chi_square_same(host, np.asarray(device), 4) > 1e-3


def test_greedy_reads_q_values_and_q_networks_return_q_only():
    net = MLPQNetwork(3, (8,))
    policy = Policy(net, Greedy(3), (4,), outputs=q_value_outputs)
    params = policy.init(jax.random.PRNGKey(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)), jnp.float32)
    q = net.apply(params, obs)
    assert q.shape == (5, 3)  # the module is a Q-network, nothing more
    inputs, value = policy.apply(params, obs)
    np.testing.assert_array_equal(inputs, q)
    np.testing.assert_array_equal(value, q.max(-1))
    np.testing.assert_array_equal(policy.greedy(params, obs), np.argmax(np.asarray(q), -1))
    a, logp = policy.distribution.sample_host(np.random.default_rng(0), np.asarray(q))
    np.testing.assert_array_equal(a, np.argmax(np.asarray(q), -1))
    assert not logp.any()


def test_forward_packed_unpacks_to_the_policy_outputs():
    policy = Policy(MLPActorCritic(3, (8,)), Categorical(3), (4,))
    params = policy.init(jax.random.PRNGKey(0))
    obs = jnp.ones((7, 4))
    inputs, value = unpack(policy.forward_packed(params, obs))
    ref_inputs, ref_value = policy.apply(params, obs)
    np.testing.assert_allclose(inputs, ref_inputs, rtol=1e-6)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    assert policy.initial_state(7) is None and not policy.recurrent


def test_a_toy_distribution_acts_on_a_worker_and_on_the_device_with_the_same_log_probs():
    config = make_config(
        TOY.config_cls, env="CartPole-v1", num_workers=1, num_envs_per_worker=4, rollout_fragment_length=32, seed=3
    )
    env = envs.make_cpu("CartPole-v1")
    policy = TOY.policy(config, env.observation_space, env.action_space)
    params = policy.init(jax.random.PRNGKey(0))
    dist = policy.distribution
    assert isinstance(dist, UniformMixture)

    # (1) on a rollout worker: the host sampler's log-probs are the distribution's JAX log-probs
    worker = RolloutWorker(WorkerSpec(config, policy), index=0)
    worker.set_weights(params, 0)
    d = worker.sample().data
    obs, actions = d["obs"].reshape(-1, 4), d["actions"].reshape(-1)
    inputs, _ = policy.apply(params, obs)
    np.testing.assert_allclose(d["logp"].reshape(-1), dist.log_prob(inputs, actions), rtol=1e-5, atol=1e-6)
    # ... and differ from a plain categorical's: the worker used the policy's distribution
    assert not np.allclose(d["logp"].reshape(-1), Categorical(2).log_prob(inputs, actions), atol=1e-3)
    worker.close()

    # (2) in device mode: the same distribution's JAX sampler, on the gymnax twin of the env
    genv, gparams = envs.make("gymnax/CartPole-v1")
    obs0, state = jax.vmap(genv.reset_env, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), 8), gparams)
    carry = EnvCarry(state, obs0, jnp.zeros(8), jnp.zeros(8, jnp.int32))
    _, traj, _ = rollout(genv, gparams, policy, None, config, params, carry, jax.random.PRNGKey(2), jnp.float32(0), 32)
    dev_obs, dev_actions = traj["obs"].reshape(-1, 4), traj["actions"].reshape(-1)
    dev_inputs, _ = policy.apply(params, dev_obs)
    np.testing.assert_allclose(traj["logp"].reshape(-1), dist.log_prob(dev_inputs, dev_actions), rtol=1e-5, atol=1e-6)
    # (3) the host sampler gives the log-probs the device computes, action for action
    for i in range(0, len(dev_actions), 37):
        row = np.repeat(np.asarray(dev_inputs[i : i + 1]), 400, axis=0)
        host_a, host_logp = dist.sample_host(np.random.default_rng(i), row)
        chosen = host_a == int(dev_actions[i])
        if chosen.any():
            np.testing.assert_allclose(host_logp[chosen][0], traj["logp"].reshape(-1)[i], rtol=1e-5, atol=1e-6)
    # (4) and the two samplers draw the same distribution (chi-square, 0.1% level)
    row = np.repeat(np.asarray(dev_inputs[:1]), 20_000, axis=0)
    host_a, _ = dist.sample_host(np.random.default_rng(0), row)
    dev_a, _ = dist.sample(jax.random.PRNGKey(5), jnp.asarray(row))
    assert chi_square_same(host_a, np.asarray(dev_a), 2) > 1e-3


def test_an_algorithm_with_the_toy_policy_trains_in_ray_and_device_mode():
    for env, mode in (("CartPole-v1", "ray"), ("gymnax/CartPole-v1", "device")):
        algo = Algorithm.build(
            "TOYMIXTURE",
            env=env,
            mode=mode,
            num_workers=0,
            num_envs_per_worker=4,
            rollout_fragment_length=16,
            train_batch_size=64,
            iterations_per_call=2,
        )
        assert isinstance(algo.program.policy.distribution, UniformMixture)
        result = algo.train()
        assert result["num_updates"] >= 1 and np.isfinite(result["learner"]["loss"])
        # The loss's entropy is the mixture's (at least that of eps/A spread over 2 actions).
        assert result["learner"]["entropy"] > 0.5
        algo.stop()
