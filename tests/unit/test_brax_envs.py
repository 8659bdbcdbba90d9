"""Brax environments behind gymnax's interface (``brax/<name>``): against brax's own
inverted pendulum, and by hand on brax's ``fast`` test environment (a point pushed along a
line: ``vel += 0.02`` while the action is positive, ``pos += 0.02 * vel``, reward ``pos``,
never done), whose programs compile in a moment where a physics step takes seconds."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.api.program import resolve_mode
from jaxflow.api.registry import get_algorithm
from jaxflow.config import make_config
from jaxflow.envs.brax_envs import DEFAULT_BACKEND, DEFAULT_EPISODE_LENGTH

PENDULUM = "brax/inverted_pendulum"
STEPS = 60  # the pole, pushed with full force to one side, falls (|angle| > 0.2) well before


@pytest.fixture(scope="module")
def pendulum():
    return envs.make(PENDULUM)


def scan_steps(env, params, key, actions):
    """The adapter's steps (gymnax's auto-resetting ``step``, as device mode calls it) beside
    brax's own ``step`` from the same reset, in one compiled scan."""

    def run(key, actions):
        obs, state = env.reset_env(key, params)
        ref = env.brax_env.reset(key)

        def body(carry, xs):
            state, ref = carry
            t, action = xs
            obs, state, reward, terminated, truncated, info = env.step(
                jax.random.fold_in(key, t), state, action, params
            )
            ref = env.brax_env.step(ref, action)
            out = dict(obs=obs, reward=reward, terminated=terminated, truncated=truncated, time=state.time)
            return (state, ref), dict(out, final_obs=info["final_observation"], ref_obs=ref.obs, ref_done=ref.done)

        _, out = jax.lax.scan(body, (state, ref), (jnp.arange(len(actions)), actions))
        return obs, ref.obs, out

    return jax.device_get(jax.jit(run)(key, actions))


def test_spaces_defaults_and_registry(pendulum):
    env, params = pendulum
    assert env.backend == DEFAULT_BACKEND == "spring"
    assert params.max_steps_in_episode == DEFAULT_EPISODE_LENGTH == 1000
    obs, act = env.observation_space(params), env.action_space(params)
    assert obs.shape == (4,) and act.shape == (1,)  # cart position, pole angle, their velocities; the force
    assert (act.low, act.high) == (-1.0, 1.0)
    assert envs.entry(PENDULUM).kind == "brax"
    assert {PENDULUM, "brax/halfcheetah", "brax/ant", "brax/hopper"} <= set(envs.list_envs("brax"))
    with pytest.raises(envs.UnknownEnvError, match="brax/inverted_pendulum"):
        envs.entry("brax/inverted_pendulm")


def test_steps_match_brax_until_the_pole_falls_then_a_fresh_episode_starts(pendulum):
    """Observations, rewards and terminations are brax's own; the step where brax's ``done``
    turns 1 is ``terminated`` (not truncated), ``final_observation`` keeps brax's last
    observation there, and the next episode starts from a new random reset."""
    env, params = pendulum
    obs0, ref_obs0, out = scan_steps(env, params, jax.random.PRNGKey(3), jnp.ones((STEPS, 1)))
    np.testing.assert_array_equal(obs0, ref_obs0)
    end = int(np.argmax(out["terminated"]))  # the first termination
    assert out["terminated"][end] and 5 < end, end
    upto = slice(0, end + 1)
    np.testing.assert_allclose(out["final_obs"][upto], out["ref_obs"][upto], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["obs"][:end], out["ref_obs"][:end], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["terminated"][upto], out["ref_done"][upto] > 0)
    assert (out["reward"][upto] == 1.0).all() and not out["truncated"].any()  # the alive bonus, every step
    assert abs(out["final_obs"][end][1]) > 0.2  # the pole's angle: why it ended
    fresh = out["obs"][end]
    assert out["time"][end] == 0 and np.abs(fresh).max() <= 0.01  # brax's reset: uniform noise of +-0.01
    assert not np.allclose(fresh, obs0)  # its own key, not the first episode's start again


def test_time_limit_truncates_and_restarts_by_hand():
    """``episode_length=3`` on ``fast``, pushed every step: positions 0.0004, 0.0012, 0.0024
    (truncated there, not terminated), then a new episode from the origin."""
    env, params = envs.make("brax/fast", episode_length=3)
    assert params.max_steps_in_episode == 3 and env.observation_space(params).shape == (2,)
    obs, state = env.reset_env(jax.random.PRNGKey(0), params)
    seen = []
    for t in range(4):
        obs, state, reward, terminated, truncated, _ = env.step(jax.random.PRNGKey(t), state, jnp.ones(1), params)
        seen.append((float(reward), bool(terminated), bool(truncated), int(state.time)))
    rewards, *flags = zip(*seen)
    assert rewards == pytest.approx((0.0004, 0.0012, 0.0024, 0.0004))
    assert flags == [(False,) * 4, (False, False, True, False), (1, 2, 0, 1)]
    np.testing.assert_allclose(obs, [0.0004, 0.02], rtol=1e-5)


def test_cpu_env_steps_by_hand_and_config_errors():
    """``make_cpu`` (Ray workers and evaluation) steps the same env on the host, truncating at
    ``episode_length``; copies with the same settings share one env (and its compiled step);
    bad ``env_config`` values fail in one line."""
    assert envs.make("brax/fast")[0] is envs.make("brax/fast", episode_length=5)[0]
    assert envs.make("brax/fast")[0] is not envs.make("brax/fast", backend="generalized")[0]
    env = envs.make_cpu("brax/fast", envs.EnvContext(seed=1), episode_length=2)
    assert env.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert env.action_space == gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs, [0.0, 0.0])
    push = np.ones(1, np.float32)
    assert env.step(push)[1:4] == pytest.approx((0.0004, False, False))
    obs, *flags = env.step(push)[:4]
    np.testing.assert_allclose(obs, [0.0012, 0.04], rtol=1e-5)
    assert flags == pytest.approx([0.0012, False, True])
    with pytest.raises(envs.BraxConfigError, match="backend='physx'.*generalized, mjx, positional, spring"):
        envs.make(PENDULUM, backend="physx")
    with pytest.raises(envs.BraxConfigError, match="episode_length must be a positive int"):
        envs.make(PENDULUM, episode_length=0)
    with pytest.raises(envs.BraxConfigError, match="bounciness"):
        envs.make(PENDULUM, bounciness=1.0)
    with pytest.raises(envs.BraxConfigError, match="not one vector"):
        envs.make("brax/fast", obs_mode="dict_state")


def test_device_mode_is_the_default_for_brax_envs():
    spec = get_algorithm("PPO")
    assert resolve_mode(make_config(spec.config_cls, env=PENDULUM), spec) == "device"
    assert resolve_mode(make_config(spec.config_cls, env=PENDULUM, mode="ray"), spec) == "ray"
