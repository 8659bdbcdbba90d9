"""Atari preprocessing (envs/atari.py) on real ALE frames: shapes, max-pooling, no-op starts,
reward clipping, sticky actions, episodic life, the registry, and the ale-py vector backend."""

from __future__ import annotations

import cv2
import gymnasium
import numpy as np
import pytest

from jaxflow import envs
from jaxflow.envs.atari import AtariConfig, AtariConfigError, make_atari

pytest.importorskip("ale_py")


def test_shapes_dtypes_and_space():
    env = make_atari("ALE/Pong-v5")
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    for a in (0, 1, 2):
        obs, *_ = env.step(a)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert env.observation_space.contains(obs)
    env.close()


def test_frame_skip_max_pools_the_last_two_frames():
    """Against a parallel raw env (same seed, frameskip=1, same sticky-action RNG): the newest
    frame of each observation is exactly INTER_AREA(max(frame 3, frame 4)) of the grayscale
    screens, as gymnasium's AtariPreprocessing computes it; older frames shift back by one."""
    seed, steps = 3, 60
    env = make_atari("ALE/Pong-v5", noop_max=0)
    raw = gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25)
    ale = raw.unwrapped.ale

    def resize(frame: np.ndarray) -> np.ndarray:
        return cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA)

    obs, _ = env.reset(seed=seed)
    raw.reset(seed=seed)
    first = resize(ale.getScreenGrayscale())
    np.testing.assert_array_equal(obs, np.stack([first] * 4))  # the stack is filled with the reset frame

    rng = np.random.default_rng(0)
    expected_prev, pooling_mattered = first, 0
    for _ in range(steps):
        a = int(rng.integers(env.action_space.n))
        obs, *_ = env.step(a)
        screens = []
        for _ in range(4):
            raw.step(a)
            screens.append(ale.getScreenGrayscale())
        expected = resize(np.maximum(screens[-2], screens[-1]))
        np.testing.assert_array_equal(obs[-1], expected)
        np.testing.assert_array_equal(obs[-2], expected_prev)
        pooling_mattered += int(not np.array_equal(expected, resize(screens[-1])))
        expected_prev = expected
    assert pooling_mattered > steps // 2  # the ball moves: max-pooling is not a no-op here
    env.close()
    raw.close()


def test_noop_starts_vary_with_the_seed_and_stay_within_noop_max():
    env = make_atari("ALE/Pong-v5", noop_max=30)
    ale = env.unwrapped.ale
    noops = []
    for seed in range(12):
        env.reset(seed=seed)
        noops.append(ale.getEpisodeFrameNumber())  # one emulator frame per no-op (frameskip=1 below)
    assert all(1 <= n <= 30 for n in noops), noops
    assert len(set(noops)) > 3, noops
    env.close()

    env = make_atari("ALE/Pong-v5", noop_max=0)
    env.reset(seed=0)
    assert env.unwrapped.ale.getEpisodeFrameNumber() == 0
    env.close()


def test_reward_clipping_keeps_the_raw_score_in_info():
    """SpaceInvaders pays 5..30 points per invader; clipped rewards are their sign, the raw
    reward is in info["raw_reward"], and info["episode"]["r"] at the game's end is the raw score."""
    env = make_atari("ALE/SpaceInvaders-v5", clip_rewards=True, max_num_frames_per_episode=4000)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    raws, clipped = [], []
    for _ in range(1500):
        _, r, te, tr, info = env.step(int(rng.integers(env.action_space.n)))
        raws.append(info["raw_reward"])
        clipped.append(r)
        if te or tr:
            break
    assert te or tr
    assert set(clipped) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(np.sign(raws), clipped)
    assert max(raws) > 1  # the clipping did something
    assert info["episode"]["r"] == pytest.approx(sum(raws))
    assert info["episode"]["r"] > sum(clipped)
    env.close()

    env = make_atari("ALE/SpaceInvaders-v5")  # unclipped by default
    env.reset(seed=0)
    rewards = [env.step(int(a))[1] for a in rng.integers(env.action_space.n, size=300)]
    assert max(rewards) > 1
    env.close()


def test_sticky_actions_default_is_passed_to_ale():
    env = make_atari("ALE/Pong-v5")
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    env.close()
    env = make_atari("ALE/Pong-v5", repeat_action_probability=0.0)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    env.close()


def test_episodic_life_ends_episodes_per_life_but_plays_on_in_the_same_game():
    env = make_atari("ALE/Breakout-v5", terminal_on_life_loss=True)
    ale = env.unwrapped.ale
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    lives_at_end, raw_score = [], 0.0
    for _ in range(3000):
        _, r, te, tr, info = env.step(int(rng.integers(env.action_space.n)))
        raw_score += r
        if te or tr:
            lives_at_end.append(ale.lives())
            if "episode" in info:  # the game is over: the score is the sum over all lives
                assert info["episode"]["r"] == raw_score
                break
            frame = ale.getEpisodeFrameNumber()
            env.reset()
            assert ale.getEpisodeFrameNumber() > frame  # the same game goes on
            assert ale.lives() == lives_at_end[-1]
    assert lives_at_end == [4, 3, 2, 1, 0]
    env.close()


def test_registry_returns_the_preprocessed_env_configured_by_env_config():
    assert "ALE/Pong-v5" in envs.list_envs("gymnasium") and "ALE/Breakout-v5" in envs.list_envs("gymnasium")
    env = envs.make_cpu("ALE/Pong-v5")
    assert env.observation_space.shape == (4, 84, 84)
    assert env.reset(seed=0)[0].shape == (4, 84, 84)
    env.close()

    env = envs.make_cpu("ALE/Pong-v5", frame_stack=2, screen_size=64, full_action_space=True)
    assert env.observation_space.shape == (2, 64, 64)
    assert env.reset(seed=0)[0].shape == (2, 64, 64)
    assert env.action_space.n == 18
    env.close()

    env = envs.make_cpu("ALE/Pong-v5", grayscale=False, frame_stack=3)
    assert env.observation_space.shape == (3, 84, 84, 3)
    env.close()

    env = envs.make_cpu("ALE/Pong-v5", preprocess=False)
    assert env.observation_space.shape == (210, 160, 3)
    env.close()

    venv = envs.VectorEnv("ALE/Pong-v5", num_envs=2, seed=0, env_config={"clip_rewards": True})
    assert venv.reset().shape == (2, 4, 84, 84)
    step = venv.step(np.zeros(2, np.int64))  # the first step's space checks pass
    assert step.obs.shape == (2, 4, 84, 84) and step.obs.dtype == np.uint8
    venv.close()


def test_registry_rejects_unknown_and_invalid_keys_naming_the_allowed_ones():
    with pytest.raises(AtariConfigError, match="allowed keys") as err:
        envs.make_cpu("ALE/Pong-v5", frameskip=4)
    assert "'frameskip'" in str(err.value)
    for name in (f.name for f in AtariConfig.__dataclass_fields__.values()):
        assert repr(name) in str(err.value)
    with pytest.raises(AtariConfigError, match="frame_stack"):
        envs.make_cpu("ALE/Pong-v5", frame_stack=0)
    with pytest.raises(AtariConfigError, match="clip_rewards"):
        envs.make_cpu("ALE/Pong-v5", clip_rewards="yes")
    with pytest.raises(AtariConfigError, match="preprocess=False"):
        envs.make_cpu("ALE/Pong-v5", preprocess=False, noop_max=3)


def test_ale_vector_env_backend_reports_unclipped_game_scores():
    """ale-py's vector env behind our VectorEnv interface: episodes end per life, rewards are
    clipped, and pop_episodes reports whole-game raw scores (SpaceInvaders pays >= 5 a hit)."""
    venv = envs.ALEVectorEnv(
        "ALE/SpaceInvaders-v5",
        num_envs=1,
        seed=0,
        env_config={"clip_rewards": True, "terminal_on_life_loss": True},
        num_threads=1,
    )
    assert venv.observation_space.shape == (4, 84, 84) and venv.action_space.n == 6
    obs = venv.reset()
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    terminations, clipped_game, games = 0, 0.0, []
    for _ in range(1000):
        step = venv.step(rng.integers(6, size=1))
        assert set(np.unique(step.reward)) <= {-1.0, 0.0, 1.0}
        assert step.obs.shape == step.final_obs.shape == (1, 4, 84, 84)
        if not (step.terminated | step.truncated).any():
            np.testing.assert_array_equal(step.final_obs, step.obs)
        terminations += int(step.terminated.sum())
        clipped_game += float(step.reward.sum())
        scores, _ = venv.pop_episodes()
        if len(scores):
            games.append((float(scores[0]), clipped_game))
            clipped_game = 0.0
    assert len(games) >= 2 and terminations > len(games)  # SpaceInvaders: 3 lives a game
    for score, clipped in games:
        assert score >= 5 * clipped > 0
    venv.close()

    fresh = envs.ALEVectorEnv("ALE/Breakout-v5", num_envs=2, seed=0)
    fresh.reset()
    with pytest.raises(envs.EnvSpaceError, match="action space"):
        fresh.step(np.array([0, 9]))
    fresh.close()


def test_an_ale_id_gets_ale_pys_vector_env_by_default_and_other_envs_python():
    """The ALE defaults: with no vector_env set (its "auto"), a worker of a preprocessed
    ALE/<Game>-v5 game steps ale-py's vector env on num_cpus_per_worker threads; a raw
    (preprocess=False) game, any other env, and vector_env="python" step gymnasium envs;
    envpool's vector env only when asked for by name."""
    from jaxflow import get_algorithm, make_vector_envs
    from jaxflow.config import ConfigError, make_config

    impala = get_algorithm("IMPALA").config_cls
    assert impala().rollout.vector_env == "auto"

    def backend(**fields) -> type:
        (venv,) = make_vector_envs(make_config(impala, num_envs_per_worker=2, **fields), seed=0)
        kind = type(venv)
        venv.close()
        return kind

    assert backend(env="ALE/Pong-v5") is envs.ALEVectorEnv
    assert backend(env="ALE/Pong-v5", vector_env="python") is envs.VectorEnv
    assert backend(env="ALE/Pong-v5", env_config={"preprocess": False}) is envs.VectorEnv
    assert backend(env="CartPole-v1") is envs.VectorEnv
    assert backend(env="CartPole-v1", vector_env="envpool") is envs.EnvPoolVectorEnv
    assert backend(env="CartPole-v1", env_config={"sutton_barto_reward": True}) is envs.VectorEnv
    assert backend(env="FrozenLake-v1") is envs.VectorEnv
    # Groups follow the backend: "auto" splits an ALE game's envs, and refuses other envs.
    grouped = make_config(impala, env="ALE/Pong-v5", num_envs_per_worker=4, num_env_groups=2)
    assert [v.num_envs for v in make_vector_envs(grouped, seed=0)] == [2, 2]
    with pytest.raises(ConfigError, match=r"num_env_groups=2 needs vector_env='ale'"):
        make_config(impala, env="CartPole-v1", num_env_groups=2)


def test_ale_vector_env_step_async_then_step_wait_is_step_and_misuse_is_refused():
    """Split stepping (the emulators run between the two calls) gives the steps of a twin
    stepped whole, sticky actions and episode ends included; out-of-order calls fail
    clearly instead of blocking on ale-py's queue."""
    config = {"max_num_frames_per_episode": 400}  # several time limits in 150 steps
    split, whole = (envs.ALEVectorEnv("ALE/Pong-v5", 3, seed=5, env_config=config, num_threads=2) for _ in range(2))
    np.testing.assert_array_equal(split.reset(), whole.reset())
    rng, ends = np.random.default_rng(1), 0
    for t in range(150):
        actions = rng.integers(6, size=3)
        split.step_async(actions)
        got, want = split.step_wait(), whole.step(actions)
        for field in envs.VectorStep._fields:
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{field} at step {t}")
        ends += int(got.truncated.sum())
    assert ends >= 3
    with pytest.raises(RuntimeError, match="step_wait\\(\\) called without step_async"):
        split.step_wait()
    split.step_async(np.zeros(3, np.int64))
    with pytest.raises(RuntimeError, match="step_async\\(\\) called twice"):
        split.step_async(np.zeros(3, np.int64))
    with pytest.raises(RuntimeError, match="reset\\(\\) between"):
        split.reset()
    split.step_wait()
    split.close()
    whole.close()


def test_vector_env_reports_unclipped_whole_game_scores():
    """With clipped rewards and per-life episodes, the agent's episodes are short and their
    rewards in {-1, 0, 1}; VectorEnv still reports the game's own score and length."""
    venv = envs.VectorEnv("ALE/Breakout-v5", 1, seed=3, env_config=dict(clip_rewards=True, terminal_on_life_loss=True))
    venv.reset()
    rng = np.random.default_rng(0)
    agent_episode_ends, seen = 0, []
    while not seen:
        step = venv.step(rng.integers(venv.action_space.n, size=1))
        assert set(np.unique(step.reward)) <= {-1.0, 0.0, 1.0}
        agent_episode_ends += int(step.terminated[0] or step.truncated[0])
        returns, lengths = venv.pop_episodes()
        seen = list(zip(returns, lengths))
    assert agent_episode_ends == 5  # Breakout's 5 lives, each an episode for the agent
    assert len(seen) == 1 and seen[0][1] > 0  # but one game in the statistics
    venv.close()
