"""Videos of evaluated episodes: one MP4 per episode, a frame per step plus the first."""

from __future__ import annotations

import imageio.v2 as imageio
import pytest

from jaxflow.api.ray_program import build_learner
from jaxflow.api.registry import get_algorithm
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import make_config
from jaxflow.rollout.evaluation import evaluate_policy


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # reading the MP4 back starts ffmpeg
def test_each_evaluated_episode_is_written_as_an_mp4(tmp_path):
    spec = get_algorithm("PPO")
    config = make_config(spec.config_cls, env="CartPole-v1", seed=2)
    policy, learner = build_learner(config, spec)
    weights = learner.get_weights()
    recorded = evaluate_policy(config, policy, weights, 2, 0, None, str(tmp_path / "videos"))
    plain = evaluate_policy(config, policy, weights, 2, 0)
    assert recorded["returns"] == plain["returns"]  # rendering changes nothing the policy sees
    assert [p.rsplit("/", 1)[-1] for p in recorded["videos"]] == ["episode_000.mp4", "episode_001.mp4"]
    for path, length in zip(recorded["videos"], recorded["lengths"]):
        reader = imageio.get_reader(path)
        assert reader.count_frames() == length + 1  # the reset's frame, then one per step
        assert reader.get_data(0).shape == (400, 608, 3)  # CartPole's 400x600, padded to 16-pixel blocks
        reader.close()


def test_an_env_without_a_renderer_is_refused_before_playing(tmp_path):
    spec = get_algorithm("PPO")
    config = make_config(spec.config_cls, env="gymnax/CartPole-v1")
    policy, learner = build_learner(config, spec)
    with pytest.raises(
        ConfigError, match="--video records gymnasium and ALE environments; 'gymnax/CartPole-v1' is a gymnax"
    ):
        evaluate_policy(config, policy, learner.get_weights(), 1, 0, None, str(tmp_path))
    assert not list(tmp_path.iterdir())
