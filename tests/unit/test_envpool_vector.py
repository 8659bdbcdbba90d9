"""envpool's vector envs behind jaxflow's interface (``vector_env="envpool"``), on real envs:
same-step autoreset mapped from envpool's next-step one, time limits as truncations, episode
statistics, per-env seeds, Atari observations and lives like ALEVectorEnv's, and the ids and
settings envpool cannot serve refused in one line."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.config import ConfigError

CARTPOLE_LIMIT = 500
CARTPOLE_RESET_BOUND = 0.05
"""CartPole-v1 starts every state variable uniformly in [-0.05, 0.05]."""
CARTPOLE_THETA_LIMIT = 12 * 2 * np.pi / 360
CARTPOLE_X_LIMIT = 2.4
PENDULUM_LIMIT = 200
BREAKOUT_LIVES = 5


def balance(obs: np.ndarray) -> np.ndarray:
    """A CartPole controller that keeps the pole up past the time limit: push toward the lean."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def test_cartpole_same_step_autoreset_and_episode_statistics():
    """Where an episode ends, ``final_obs`` is its last state (past a termination bound) and
    ``obs`` a fresh start; the next step goes on from that start with reward 1 (envpool's own
    reset step, reward 0, never shows); pop_episodes matches the rewards seen."""
    n = 8
    venv = envs.EnvPoolVectorEnv("CartPole-v1", n, seed=0)
    obs = venv.reset()
    assert obs.shape == (n, 4) and obs.dtype == np.float32 and np.abs(obs).max() <= CARTPOLE_RESET_BOUND
    rng = np.random.default_rng(0)
    returns, lengths, seen = np.zeros(n), np.zeros(n, int), []
    ends = 0
    for _ in range(300):
        step = venv.step(rng.integers(2, size=n))
        assert (step.reward == 1.0).all()
        returns += step.reward
        lengths += 1
        ended = step.terminated | step.truncated
        assert not step.truncated.any()  # random play never lasts 500 steps
        np.testing.assert_array_equal(step.obs[~ended], step.final_obs[~ended])
        for i in np.flatnonzero(ended):
            last = step.final_obs[i]
            assert abs(last[0]) > CARTPOLE_X_LIMIT or abs(last[2]) > CARTPOLE_THETA_LIMIT
            assert np.abs(step.obs[i]).max() <= CARTPOLE_RESET_BOUND
            seen.append((returns[i], lengths[i]))
            returns[i], lengths[i] = 0.0, 0
        ends += int(ended.sum())
        obs = step.obs
    got_returns, got_lengths = venv.pop_episodes()
    assert ends > 50 and len(got_returns) == ends
    np.testing.assert_array_equal(got_returns, [r for r, _ in seen])
    np.testing.assert_array_equal(got_lengths, [ln for _, ln in seen])
    assert venv.pop_episodes()[0].size == 0
    venv.close()


def test_cartpole_time_limit_is_a_truncation_at_exactly_500_steps():
    n = 4
    venv = envs.EnvPoolVectorEnv("CartPole-v1", n, seed=1)
    obs = venv.reset()
    for t in range(1, CARTPOLE_LIMIT + 2):
        step = venv.step(balance(obs))
        assert not step.terminated.any(), t
        assert step.truncated.all() == (t == CARTPOLE_LIMIT) and step.truncated.any() == (t == CARTPOLE_LIMIT), t
        if t == CARTPOLE_LIMIT:
            assert (np.abs(step.final_obs[:, 0]) < CARTPOLE_X_LIMIT).all()  # still balanced when cut
            assert np.abs(step.obs).max() <= CARTPOLE_RESET_BOUND
        obs = step.obs
    returns, lengths = venv.pop_episodes()
    np.testing.assert_array_equal(lengths, [CARTPOLE_LIMIT] * n)
    np.testing.assert_array_equal(returns, [float(CARTPOLE_LIMIT)] * n)
    venv.close()


def test_pendulum_episodes_are_truncated_at_200_steps_and_env_config_sets_the_limit():
    venv = envs.EnvPoolVectorEnv("Pendulum-v1", 2, seed=0)
    assert venv.reset().dtype == np.float32
    total = np.zeros(2)
    for t in range(1, PENDULUM_LIMIT + 1):
        step = venv.step(np.full((2, 1), 0.5, np.float32))
        total += step.reward
        assert not step.terminated.any() and step.truncated.all() == (t == PENDULUM_LIMIT)
    returns, lengths = venv.pop_episodes()
    np.testing.assert_array_equal(lengths, [PENDULUM_LIMIT] * 2)
    np.testing.assert_allclose(returns, total, rtol=1e-5)
    assert (returns < 0).all()  # Pendulum's cost
    venv.close()
    short = envs.EnvPoolVectorEnv("Pendulum-v1", 1, seed=0, env_config={"max_episode_steps": 7})
    short.reset()
    assert [bool(short.step(np.zeros((1, 1), np.float32)).truncated[0]) for _ in range(7)] == [False] * 6 + [True]
    short.close()


def test_hopper_terminations_and_the_ids_match_gymnasiums_spaces_and_limits():
    venv = envs.EnvPoolVectorEnv("Hopper-v5", 2, seed=0)
    venv.reset()
    rng = np.random.default_rng(0)
    terminated = 0
    for _ in range(200):
        step = venv.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
        assert step.obs.dtype == np.float32 and not step.truncated.any()
        for i in np.flatnonzero(step.terminated):  # fell: the next obs is a new start
            assert not np.allclose(step.obs[i], step.final_obs[i])
        terminated += int(step.terminated.sum())
    assert terminated >= 2 and len(venv.pop_episodes()[0]) == terminated
    venv.close()
    for env_id in sorted(envs.ENVPOOL_IDS):
        ours, pool = gymnasium.make(env_id), envs.EnvPoolVectorEnv(env_id, 1, seed=0)
        assert pool.observation_space.shape == ours.observation_space.shape, env_id
        assert type(pool.action_space) is type(ours.action_space), env_id
        if isinstance(ours.action_space, gymnasium.spaces.Box):
            # envpool's bounds are float64, gymnasium's float32: equal as the actions are sent.
            for bound in ("low", "high"):
                theirs, want = getattr(pool.action_space, bound), getattr(ours.action_space, bound)
                np.testing.assert_array_equal(theirs.astype(np.float32), want, err_msg=f"{env_id} {bound}")
        else:
            assert pool.action_space.n == ours.action_space.n, env_id
        assert pool._pool.config["max_episode_steps"] == ours.spec.max_episode_steps, env_id
        ours.close()
        pool.close()


def test_env_i_is_seeded_seed_plus_i_and_seeds_decide_the_trajectories():
    def trajectory(seed: int, n: int) -> np.ndarray:
        venv = envs.EnvPoolVectorEnv("CartPole-v1", n, seed=seed)
        rng, frames = np.random.default_rng(7), [venv.reset()]
        frames += [venv.step(rng.integers(2, size=n)).obs for _ in range(60)]
        venv.close()
        return np.stack(frames)

    a, b = trajectory(10, 3), trajectory(10, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], trajectory(11, 3)[0])
    # Env 1 of seed 10 starts as env 0 of seed 11.
    np.testing.assert_array_equal(a[0, 1], trajectory(11, 1)[0, 0])


@pytest.mark.parametrize("config", [{}, {"grayscale": False, "frame_stack": 2, "screen_size": 64}])
def test_atari_observations_have_ale_vector_envs_shape_dtype_and_space(config):
    pool = envs.EnvPoolVectorEnv("ALE/Pong-v5", 2, seed=0, env_config=config)
    ale = envs.ALEVectorEnv("ALE/Pong-v5", 2, seed=0, env_config=config, num_threads=1)
    assert pool.observation_space == ale.observation_space and pool.action_space == ale.action_space
    first, ale_first = pool.reset(), ale.reset()
    assert first.shape == ale_first.shape and first.dtype == ale_first.dtype == np.uint8
    # The game's first frame fills the stack (jaxflow's preprocessing; ale-py pads with zeros).
    for k in range(1, first.shape[1]):
        np.testing.assert_array_equal(first[:, k], first[:, 0])
    # Pong's court stands still for its first frames: both backends' newest frame is the same
    # picture (the RGB one too, so envpool's channel-first frames were laid out as jaxflow's).
    assert 50 < first.mean() < 200
    np.testing.assert_array_equal(first[:, -1], ale_first[:, -1])
    for _ in range(3):
        step, ale_step = pool.step(np.array([0, 1])), ale.step(np.array([0, 1]))
        assert step.obs.shape == step.final_obs.shape == ale_step.obs.shape
    pool.close()
    ale.close()


def test_atari_lost_lives_end_episodes_but_games_are_the_statistics():
    """Breakout with terminal_on_life_loss: each of the 5 lives ends an episode for the
    agent while the game plays on (obs is final_obs), and pop_episodes reports one game,
    its unclipped score; clipped rewards are signs."""
    config = {"terminal_on_life_loss": True, "clip_rewards": True}
    venv = envs.EnvPoolVectorEnv("ALE/Breakout-v5", 1, seed=3, env_config=config)
    venv.reset()
    rng = np.random.default_rng(0)
    life_losses, games, clipped = 0, [], 0.0
    while not games:
        step = venv.step(rng.integers(venv.action_space.n, size=1))
        assert set(np.unique(step.reward)) <= {-1.0, 0.0, 1.0} and not step.truncated.any()
        clipped += float(step.reward[0])
        returns, lengths = venv.pop_episodes()
        games = list(zip(returns, lengths))
        if step.terminated[0] and not games:  # a life lost: same game, no reset
            np.testing.assert_array_equal(step.obs, step.final_obs)
            life_losses += 1
    assert life_losses == BREAKOUT_LIVES - 1
    ((score, length),) = games
    assert length > BREAKOUT_LIVES and score >= clipped >= 0
    venv.close()


def test_step_async_then_step_wait_is_step_and_misuse_is_refused():
    split, whole = (envs.EnvPoolVectorEnv("CartPole-v1", 3, seed=5) for _ in range(2))
    np.testing.assert_array_equal(split.reset(), whole.reset())
    rng = np.random.default_rng(1)
    for t in range(40):
        actions = rng.integers(2, size=3)
        split.step_async(actions)
        got, want = split.step_wait(), whole.step(actions)
        for field in envs.VectorStep._fields:
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{field} at {t}")
    with pytest.raises(RuntimeError, match=r"step_wait\(\) called without step_async"):
        split.step_wait()
    split.step_async(np.zeros(3, np.int64))
    with pytest.raises(RuntimeError, match=r"step_async\(\) called twice"):
        split.step_async(np.zeros(3, np.int64))
    with pytest.raises(RuntimeError, match=r"reset\(\) between"):
        split.reset()
    split.step_wait()
    split.close()
    whole.close()
    fresh = envs.EnvPoolVectorEnv("CartPole-v1", 2, seed=0)
    fresh.reset()
    with pytest.raises(envs.EnvSpaceError, match="action space"):
        fresh.step(np.array([0, 2]))
    fresh.close()


@pytest.mark.parametrize(
    "env_id, env_config, message",
    [
        (
            "FrozenLake-v1",
            {},
            r"vector_env='envpool' runs .*CartPole-v1.* not 'FrozenLake-v1'; use vector_env='python'",
        ),
        (
            "CartPole-v1",
            {"sutton_barto_reward": True},
            r"key\(s\) \['sutton_barto_reward'\].*takes \['max_episode_steps'\]",
        ),
        (
            "CartPole-v1",
            {"max_episode_steps": "long"},
            r"envpool refuses 'CartPole-v1'.*\{'max_episode_steps': 'int'\}",
        ),
        ("ALE/Pong-v5", {"preprocess": False}, r"preprocess=False: envpool always preprocesses"),
        ("ALE/Pong-v5", {"noop_max": 0}, r"noop_max=0: envpool plays 1 to noop_max no-ops"),
        ("ALE/Pong-v5", {"frame_skip": 1}, r"frame_skip=1: envpool needs at least 2"),
        (
            "ALE/Pong-v5",
            {"max_num_frames_per_episode": 1001},
            r"max_num_frames_per_episode=1001: .*multiple of frame_skip=4",
        ),
        ("ALE/Pong-v5", {"noops": 3}, r"Unknown env_config key\(s\) \['noops'\]"),
    ],
)
def test_what_envpool_cannot_serve_is_refused_in_one_line(env_id, env_config, message):
    with pytest.raises(envs.EnvPoolConfigError, match=message) as info:
        envs.check_envpool(env_id, env_config)
    assert "\n" not in str(info.value)


def test_a_config_envpool_cannot_serve_fails_at_build_time_and_auto_leaves_envpool_to_be_asked_for():
    """Refused by Algorithm.build before any worker starts (a ConfigError, one line); a config
    it serves gives each worker group (double buffering) an EnvPoolVectorEnv of its share of
    the envs, seeded as one vector would be."""
    from jaxflow import Algorithm, get_algorithm, make_vector_envs
    from jaxflow.config import make_config
    from jaxflow.rollout import vector_backend

    with pytest.raises(
        ConfigError, match=r"cannot set env_config key\(s\) \['goal_velocity'\] of 'MountainCar-v0'"
    ) as info:
        Algorithm.build("PPO", env="MountainCar-v0", env_config={"goal_velocity": 0.1}, vector_env="envpool")
    assert "\n" not in str(info.value)
    ppo = get_algorithm("PPO").config_cls
    # "auto": ale-py's for the ALE games, else Python; envpool only by name (a seed gives other
    # episodes with it, and the suite's learning thresholds are measured on Python's envs).
    auto = {
        (env_id, str(env_config)): vector_backend(make_config(ppo, env=env_id, env_config=env_config))
        for env_id, env_config in [
            ("CartPole-v1", {}),
            ("Pendulum-v1", {"max_episode_steps": 100}),
            ("HalfCheetah-v5", {}),
            ("CartPole-v1", {"sutton_barto_reward": True}),
            ("ALE/Pong-v5", {}),
            ("FrozenLake-v1", {}),
        ]
    }
    assert list(auto.values()) == ["python", "python", "python", "python", "ale", "python"]
    assert vector_backend(make_config(ppo, env="CartPole-v1", vector_env="envpool")) == "envpool"
    config = make_config(ppo, env="CartPole-v1", vector_env="envpool", num_envs_per_worker=4, num_env_groups=2)
    groups = make_vector_envs(config, seed=0)
    assert [(type(v), v.num_envs) for v in groups] == [(envs.EnvPoolVectorEnv, 2)] * 2
    # Group 1's first env is the worker's env 2, seeded 0 + 2, as without groups.
    alone = envs.EnvPoolVectorEnv("CartPole-v1", 1, seed=2)
    np.testing.assert_array_equal(groups[1].reset()[0], alone.reset()[0])
    for venv in [*groups, alone]:
        venv.close()
