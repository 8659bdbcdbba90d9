"""envs.VectorEnv: termination vs truncation, auto-reset, episode statistics, space checks."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxflow import envs


class Ticker(gymnasium.Env):
    """Deterministic: obs = [t, episodes started]; reward = t + action.

    Copy ``vector_index`` 0 terminates after 2 steps, copy 1 is truncated after 3,
    so one VectorEnv shows both kinds of episode end at known steps.
    """

    observation_space = gymnasium.spaces.Box(0.0, 1000.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, context: envs.EnvContext, terminate_at: int = 2, truncate_at: int = 3):
        self.ends_by = "terminated" if context.vector_index % 2 == 0 else "truncated"
        self.length = terminate_at if self.ends_by == "terminated" else truncate_at
        self.t = 0
        self.episodes = 0

    def _obs(self):
        return np.array([self.t, self.episodes], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.episodes += 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return (
            self._obs(),
            float(self.t + action),
            end and self.ends_by == "terminated",
            end and self.ends_by == "truncated",
            {},
        )


envs.register("test/Ticker-v0", Ticker, "deterministic counter env for unit tests")


def make_ticker(num_envs: int = 2) -> envs.VectorEnv:
    return envs.VectorEnv("test/Ticker-v0", num_envs=num_envs, seed=0)


def test_terminated_and_truncated_pass_through_separately():
    venv = make_ticker()
    venv.reset()
    ones = np.ones(2, np.int64)
    flags = [venv.step(ones) for _ in range(6)]
    terminated = np.array([s.terminated for s in flags])
    truncated = np.array([s.truncated for s in flags])
    # env 0 terminates at steps 2, 4, 6; env 1 is truncated at steps 3 and 6.
    np.testing.assert_array_equal(terminated[:, 0], [False, True, False, True, False, True])
    np.testing.assert_array_equal(truncated[:, 0], [False] * 6)
    np.testing.assert_array_equal(terminated[:, 1], [False] * 6)
    np.testing.assert_array_equal(truncated[:, 1], [False, False, True, False, False, True])
    assert terminated.dtype == bool and truncated.dtype == bool


def test_final_obs_is_the_terminal_obs_and_obs_the_reset_obs():
    venv = make_ticker()
    obs = venv.reset()
    np.testing.assert_array_equal(obs, [[0, 1], [0, 1]])
    assert obs.dtype == np.float32

    s1 = venv.step(np.zeros(2, np.int64))
    np.testing.assert_array_equal(s1.obs, [[1, 1], [1, 1]])
    np.testing.assert_array_equal(s1.final_obs, s1.obs)  # no episode ended

    s2 = venv.step(np.zeros(2, np.int64))
    # env 0 ended: final_obs is its last observation, obs its next episode's first.
    np.testing.assert_array_equal(s2.final_obs[0], [2, 1])
    np.testing.assert_array_equal(s2.obs[0], [0, 2])
    np.testing.assert_array_equal(s2.final_obs[1], [2, 1])
    np.testing.assert_array_equal(s2.obs[1], [2, 1])

    s3 = venv.step(np.zeros(2, np.int64))
    np.testing.assert_array_equal(s3.final_obs[1], [3, 1])  # truncated: the same split
    np.testing.assert_array_equal(s3.obs[1], [0, 2])
    np.testing.assert_array_equal(s3.obs[0], [1, 2])


def test_pop_episodes_returns_exact_returns_and_lengths():
    venv = make_ticker()
    venv.reset()
    rewards = []
    for _ in range(6):
        rewards.append(venv.step(np.ones(2, np.int64)).reward)
    np.testing.assert_array_equal(rewards[0], [2.0, 2.0])  # t=1 plus action 1
    returns, lengths = venv.pop_episodes()
    # env 0: (1+1) + (2+1) = 5 over 2 steps, ending at steps 2, 4, 6;
    # env 1: (1+1) + (2+1) + (3+1) = 9 over 3 steps, ending at steps 3, 6.
    # Episodes are listed in the order they ended, env order within a step.
    np.testing.assert_array_equal(returns, [5.0, 9.0, 5.0, 5.0, 9.0])
    np.testing.assert_array_equal(lengths, [2, 3, 2, 2, 3])
    assert returns.dtype == np.float32 and lengths.dtype == np.int32

    empty_returns, empty_lengths = venv.pop_episodes()
    assert empty_returns.shape == (0,) and empty_lengths.shape == (0,)

    # An episode in progress at pop time keeps its partial return for the next pop.
    venv.step(np.zeros(2, np.int64))  # env 0: t=1 r=1; env 1: t=1 r=1
    venv.step(np.zeros(2, np.int64))  # env 0 ends: 1 + 2 = 3
    assert venv.pop_episodes()[0].tolist() == [3.0]


def test_reset_clears_partial_episodes():
    venv = make_ticker()
    venv.reset()
    venv.step(np.ones(2, np.int64))
    venv.reset()
    venv.step(np.ones(2, np.int64))
    venv.step(np.ones(2, np.int64))
    returns, lengths = venv.pop_episodes()
    assert returns.tolist() == [5.0] and lengths.tolist() == [2]


def test_env_kwargs_reach_the_factory():
    venv = envs.VectorEnv("test/Ticker-v0", num_envs=1, seed=0, env_config={"terminate_at": 4})
    venv.reset()
    ends = [bool(venv.step(np.zeros(1, np.int64)).terminated[0]) for _ in range(4)]
    assert ends == [False, False, False, True]


@pytest.mark.parametrize("bad", [np.array([0, 2]), np.array([0, -1]), np.array([0.0, 1.0])], ids=["2", "-1", "float"])
def test_action_outside_space_raises_naming_env_and_space(bad):
    venv = make_ticker()
    venv.reset()
    with pytest.raises(envs.EnvSpaceError) as err:
        venv.step(bad)
    msg = str(err.value)
    assert "'test/Ticker-v0'" in msg
    assert "Discrete(2)" in msg


def test_wrong_observation_shape_raises_on_first_step():
    venv = envs.VectorEnv("test/WrongObservationShape-v0", num_envs=2, seed=0)
    obs = venv.reset()  # reset observations are fine
    assert obs.shape == (2, 4)
    with pytest.raises(envs.EnvSpaceError) as err:
        venv.step(np.zeros(2, np.int64))
    msg = str(err.value)
    assert "test/WrongObservationShape-v0" in msg
    assert "(3,)" in msg and "(4,)" in msg


def test_unknown_env_suggests_the_close_id():
    with pytest.raises(envs.UnknownEnvError) as err:
        envs.make("CartPol-v1")
    assert "'CartPol-v1'" in str(err.value)
    assert "CartPole-v1" in str(err.value).replace("'CartPol-v1'", "")


def test_step_async_then_step_wait_is_step_and_misuse_is_refused():
    split, whole = make_ticker(), make_ticker()
    np.testing.assert_array_equal(split.reset(), whole.reset())
    for t in range(5):
        actions = np.array([t % 2, 1 - t % 2])
        split.step_async(actions)
        got, want = split.step_wait(), whole.step(actions)
        for field in envs.VectorStep._fields:
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{field} at step {t}")
    with pytest.raises(RuntimeError, match="step_wait\\(\\) called without step_async"):
        split.step_wait()
    split.step_async(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="step_async\\(\\) called twice"):
        split.step_async(np.zeros(2, np.int64))


def test_a_jax_env_on_the_host_steps_as_gymnax_does_with_the_same_keys():
    """``GymnaxCPUEnv`` (a JAX env behind gymnasium, what Ray workers and evaluation step) splits
    its key, steps and reads the time limit in one compiled call: its observations, rewards and
    episode ends are gymnax's own ``reset_env``/``step_env``/``is_truncated`` with that key chain,
    through a truncation at a (shortened) time limit."""
    import jax

    env = envs.make_cpu("gymnax/Acrobot-v1", envs.EnvContext(seed=0))
    gymnax_env, params = env._env, env._params.replace(max_steps_in_episode=7)
    env._params = params
    key = jax.random.PRNGKey(5)
    key, sub = jax.random.split(key)
    expected, state = gymnax_env.reset_env(sub, params)
    np.testing.assert_array_equal(env.reset(seed=5)[0], np.asarray(expected, np.float32))
    ends = []
    for t, action in enumerate([0, 2, 1, 2, 0, 0, 1]):
        key, sub = jax.random.split(key)
        expected, state, reward, terminated, _ = gymnax_env.step_env(sub, state, action, params)
        obs, r, te, tr, _ = env.step(action)
        np.testing.assert_allclose(obs, np.asarray(expected, np.float32), rtol=1e-5)  # compiled vs eager: roundoff
        assert (r, te, tr) == (float(reward), bool(terminated), bool(gymnax_env.is_truncated(state, params)))
        if te or tr:
            ends.append((t, te, tr))
    assert ends == [(6, False, True)]  # Acrobot does not swing up in 7 steps: the limit ends it
