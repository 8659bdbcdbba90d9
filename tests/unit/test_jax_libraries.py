"""The JAX libraries' environments (craftax/, xminigrid/, navix/, jumanji/) behind gymnax's
interface: each adapter stepped as device mode steps it (gymnax's auto-resetting ``step``)
against the library's own calls with the same keys, and a short device-mode PPO run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxflow import Algorithm, envs
from jaxflow.envs.gymnax_cpu import to_gymnasium_space
from jaxflow.envs.jax_libraries import Family, MissingLibraryError
from jaxflow.envs.jax_library_adapters import library_ids

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def run_ours(env_id, actions, **env_config):
    """Our env from a reset with key 0, stepped with ``actions``: per step the observation, the
    reward, terminated, truncated, the final observation, and the key of each step."""
    env, params = envs.make(env_id, **env_config)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    step, out = jax.jit(env.step), []
    for i, a in enumerate(actions):
        k = jax.random.fold_in(key, i)
        obs, state, r, term, trunc, info = step(k, state, jnp.int32(a), params)
        out.append((np.asarray(obs), float(r), bool(term), bool(trunc), np.asarray(info["final_observation"]), k))
    return env, params, out


def flat(*parts):
    return np.concatenate([np.ravel(np.asarray(p, np.float32)) for p in parts])


def reset_key(k):
    return jax.random.split(k)[1]  # gymnax's step resets with the second half of its key


@pytest.mark.parametrize("library", ["navix", "xminigrid"])
def test_grid_worlds_terminate_at_the_goal_then_truncate_at_their_time_limit(library):
    # Empty-5x5: the agent starts at (1, 1) facing east, the goal is at (3, 3): forward, forward,
    # turn right, forward, forward reaches it (5 steps); then 6 turns run out the time limit.
    if library == "navix":
        import navix as lib

        env_id, forward, right = "navix/Navix-Empty-5x5-v0", 2, 1
        ref = lib.make("Navix-Empty-5x5-v0", max_steps=6)
        reset, step = jax.jit(ref.reset), jax.jit(ref.step)
        goal_reward = 1.0
    else:
        import xminigrid as lib

        env_id, forward, right = "xminigrid/MiniGrid-Empty-5x5", 0, 1
        ref_env, ref_params = lib.make("MiniGrid-Empty-5x5", max_steps=6)
        reset = jax.jit(lambda k: ref_env.reset(ref_params, k))
        step = jax.jit(lambda t, a: ref_env.step(ref_params, t, a))
        goal_reward = 1 - 0.9 * 5 / 6  # xminigrid's reward: 1 - 0.9 * steps / max_steps
    actions = [forward, forward, right, forward, forward] + [right] * 6
    _, params, ours = run_ours(env_id, actions, max_steps=6)
    assert params.max_steps_in_episode == 6
    t = reset(jax.random.PRNGKey(0))
    ended = []
    for i, (a, (obs, r, term, trunc, final, k)) in enumerate(zip(actions, ours)):
        t = step(t, jnp.int32(a))
        np.testing.assert_array_equal(final, flat(t.observation))  # the library's observation, as float32
        assert r == pytest.approx(float(t.reward))
        if term or trunc:
            ended.append((i, term, trunc, r))
            t = reset(reset_key(k))  # the fresh episode gymnax's step started
        np.testing.assert_array_equal(obs, flat(t.observation))
    assert ended == [(4, True, False, pytest.approx(goal_reward)), (10, False, True, 0.0)]


def test_jumanji_snake_masks_actions_and_ends_as_jumanji_says():
    import jumanji

    ref = jumanji.make("Snake-v1", time_limit=12)
    reset, step = jax.jit(ref.reset), jax.jit(ref.step)
    actions = [0] * 3 + [1, 3] * 6  # up into the wall (seed 0's snake dies on its 3rd step), then wiggle
    env, params, ours = run_ours("jumanji/Snake-v1", actions, time_limit=12)
    space = to_gymnasium_space(env.observation_space(params))
    assert isinstance(space, envs.MaskedBox) and space.num_actions == 4 and space.shape == (12 * 12 * 5 + 1 + 4,)
    state, t = reset(jax.random.PRNGKey(0))
    ended = []
    for i, (a, (obs, r, term, trunc, final, k)) in enumerate(zip(actions, ours)):
        state, t = step(state, jnp.int32(a))
        o = t.observation  # grid, step count, then the mask as 1.0 / 0.0
        np.testing.assert_array_equal(final, flat(o.grid, o.step_count, o.action_mask))
        assert r == float(t.reward)
        if term or trunc:
            ended.append((i, term, trunc))
            state, t = reset(reset_key(k))
        np.testing.assert_array_equal(
            obs, flat(t.observation.grid, t.observation.step_count, t.observation.action_mask)
        )
    # Death, then the time limit (12 steps later): both with discount 0, so both terminations.
    # (Snake ends at its time_limit with dm_env's termination; only an env that ends with
    # discount 1, xminigrid's time limit above, is a truncation.)
    assert ended == [(2, True, False), (14, True, False)]


def test_craftax_truncates_at_max_timesteps_and_matches_its_step_env():
    from craftax.craftax_env import make_craftax_env_from_name

    env, params = envs.make("craftax/Craftax-Classic-Symbolic-v1", max_timesteps=2)
    ref = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    ref_params = ref.default_params.replace(max_timesteps=2)
    assert params.max_steps_in_episode == 2 and env.action_space(params).n == 17
    # Ours and craftax's own calls in one compiled function each, on the same key and state:
    # XLA merges the identical computations, so craftax's step (about 15 CPU-seconds to
    # compile) is compiled once, not twice.
    reset = jax.jit(lambda k: (env.reset_env(k, params), ref.reset_env(k, ref_params)))
    step = jax.jit(lambda k, s: (env.step_env(k, s, 0, params), ref.step_env(k, s.inner, 0, ref_params)))
    (obs, state), (ref_obs, _) = reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(obs, flat(ref_obs))
    for t in range(2):
        (obs, state, r, term, _), (ref_obs, _, ref_r, done, _) = step(jax.random.PRNGKey(t + 1), state)
        np.testing.assert_array_equal(obs, flat(ref_obs))
        assert float(r) == float(ref_r) and bool(done) == (t == 1)  # craftax: done at max_timesteps
        # The time limit is a truncation, not a death: gymnax's step would bootstrap it.
        assert (bool(term), bool(env.is_truncated(state, params))) == (False, t == 1)


def test_ids_are_listed_checked_and_a_bad_option_is_one_line():
    assert "navix/Navix-Empty-5x5-v0" in envs.list_envs("jaxlib")
    assert envs.entry("xminigrid/MiniGrid-Empty-5x5").kind == "jaxlib"
    with pytest.raises(envs.UnknownEnvError, match="Did you mean one of.*navix/Navix-Empty-5x5-v0"):
        envs.entry("navix/Navix-Empty-5x5")
    with pytest.raises(envs.JaxLibraryConfigError, match="xminigrid/MiniGrid-Empty-5x5: env_config"):
        envs.make("xminigrid/MiniGrid-Empty-5x5", no_such_option=1)
    absent = Family("nolib/", "jaxflow_no_such_library", "X", lambda: ("X",), lambda name: None)
    with pytest.raises(MissingLibraryError, match=r"need the jaxflow_no_such_library package.*jaxflow-rl\[jaxenvs\]"):
        library_ids(absent)


# A grid world's integer image observations (navix's, xminigrid's) reach PPO through the same
# adapter path; navix's learning test trains on one, so only the masked library is run here.
@pytest.mark.parametrize("env_id, masked", [("jumanji/Snake-v1", True)])
def test_ppo_trains_an_iteration_in_device_mode(env_id, masked):
    algo = Algorithm.build(
        "PPO",
        env=env_id,
        num_envs=4,
        rollout_fragment_length=8,
        train_batch_size=32,
        minibatch_size=16,
        num_epochs=1,
        iterations_per_call=1,
        seed=0,
    )
    try:
        assert algo.mode == "device" and algo.program.policy.action_mask is masked
        result = algo.train()
        assert result["env_steps_sampled"] == 4 * 8 and np.isfinite(result["learner"]["loss"])
    finally:
        algo.stop()
