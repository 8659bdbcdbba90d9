"""Config validation, --set parsing and JSON round trips (jaxflow.config + algorithm configs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jaxflow.algorithms.a2c import A2CConfig
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.config.fields import ConfigError, from_json_dict, to_json_dict, with_overrides


def test_defaults_are_valid():
    cfg = PPOConfig()
    assert cfg.lr == 1e-3 and cfg.clip_eps == 0.2 and cfg.hidden_sizes == (64, 64)


@pytest.mark.parametrize("cls", [PPOConfig, A2CConfig])
def test_negative_lr_names_lr(cls):
    with pytest.raises(ConfigError, match=r"\.lr must satisfy 0 < value, got -0\.1"):
        cls(lr=-0.1)


@pytest.mark.parametrize("field", ["lr", "gamma", "clip_eps", "vf_clip"])
def test_nan_violates_every_bound(field):
    with pytest.raises(ConfigError, match=rf"PPOConfig\.{field} must satisfy"):
        PPOConfig(**{field: float("nan")})
    with pytest.raises(ConfigError, match=rf"PPOConfig\.{field} must satisfy"):
        with_overrides(PPOConfig(), {field: "nan"})


def test_zero_clip_eps_is_rejected():
    # clip_eps is a strict lower bound: 0 would make PPO's ratio clip a no-op trust region.
    with pytest.raises(ConfigError, match=r"PPOConfig\.clip_eps"):
        PPOConfig(clip_eps=0.0)
    assert PPOConfig(clip_eps=1e-6).clip_eps == 1e-6


def test_bad_on_worker_failure_lists_allowed_values():
    with pytest.raises(ConfigError) as err:
        PPOConfig(on_worker_failure="bogus")
    msg = str(err.value)
    assert "on_worker_failure" in msg and "'bogus'" in msg
    for allowed in ("'raise'", "'ignore'", "'restart'"):
        assert allowed in msg


def test_cross_field_constraint():
    with pytest.raises(ConfigError, match=r"minibatch_size \(512\) must be <= train_batch_size \(256\)"):
        PPOConfig(minibatch_size=512, train_batch_size=256)


def test_env_groups_need_the_ale_backend_and_must_divide_the_envs():
    with pytest.raises(ConfigError, match=r"num_env_groups=2 needs vector_env='ale'"):
        PPOConfig(num_env_groups=2)
    with pytest.raises(ConfigError, match=r"num_env_groups=3 must divide num_envs_per_worker=8"):
        PPOConfig(env="ALE/Pong-v5", vector_env="ale", num_envs_per_worker=8, num_env_groups=3)
    with pytest.raises(ConfigError, match=r"PPOConfig\.num_env_groups must satisfy"):
        PPOConfig(num_env_groups=0)
    assert PPOConfig(env="ALE/Pong-v5", vector_env="ale", num_env_groups=4).num_env_groups == 4


def test_train_batch_size_bounds_the_minibatch_only_in_ray_mode():
    # Device mode trains on num_envs x rollout_fragment_length (2048 x 32 here), not on
    # train_batch_size; its program checks the minibatch against that batch instead.
    assert PPOConfig(env="gymnax/CartPole-v1", num_envs=2048, minibatch_size=16384).minibatch_size == 16384
    for fields in ({"env": "gymnax/CartPole-v1", "mode": "ray"}, {"env": "CartPole-v1"}):
        with pytest.raises(ConfigError, match=r"minibatch_size \(16384\) must be <= train_batch_size \(1024\)"):
            PPOConfig(minibatch_size=16384, **fields)


def test_with_overrides_parses_declared_types():
    base = PPOConfig()
    cfg = with_overrides(base, {"lr": "3e-4", "hidden_sizes": "32,32", "num_workers": "0"})
    assert cfg.lr == 3e-4 and type(cfg.lr) is float
    assert cfg.hidden_sizes == (32, 32) and all(type(h) is int for h in cfg.hidden_sizes)
    assert cfg.num_workers == 0 and type(cfg.num_workers) is int
    assert type(cfg) is PPOConfig
    # Only the overridden fields change, and the original is untouched.
    assert dataclasses.replace(cfg, lr=base.lr, hidden_sizes=base.hidden_sizes, num_workers=base.num_workers) == base
    assert base.lr == 1e-3


def test_with_overrides_parses_literal_and_dict_fields():
    cfg = with_overrides(PPOConfig(), {"on_worker_failure": "restart", "env_config": '{"crash_at_step": 5}'})
    assert cfg.on_worker_failure == "restart"
    assert cfg.env_config == {"crash_at_step": 5}


def test_with_overrides_still_validates():
    with pytest.raises(ConfigError, match=r"\.lr must satisfy"):
        with_overrides(PPOConfig(), {"lr": "-1"})


def test_unknown_field_suggests_the_closest():
    with pytest.raises(ConfigError) as err:
        with_overrides(PPOConfig(), {"lrr": "0.1"})
    msg = str(err.value)
    assert "'lrr'" in msg
    assert "Did you mean ['lr']" in msg


def test_wrong_type_names_the_field():
    with pytest.raises(ConfigError, match=r"PPOConfig\.num_workers must be int, got 'two'"):
        with_overrides(PPOConfig(), {"num_workers": "two"})


def test_wrong_python_type_on_construction_names_the_field():
    with pytest.raises(ConfigError, match=r"\.num_workers must be int"):
        PPOConfig(num_workers=1.5)
    with pytest.raises(ConfigError, match=r"\.num_workers must be int"):
        PPOConfig(num_workers=True)  # bool is an int subclass but never a count


@pytest.mark.parametrize(
    "cfg",
    [
        PPOConfig(),
        PPOConfig(
            lr=3e-4, hidden_sizes=(32, 16, 8), env_config={"a": 1, "b": [1, 2]}, vf_clip=0.5, on_worker_failure="ignore"
        ),
        A2CConfig(num_workers=0, gamma=0.9),
    ],
)
def test_json_round_trip(cfg):
    data = to_json_dict(cfg)
    text = json.dumps(data)  # must be plain JSON
    back = from_json_dict(type(cfg), json.loads(text))
    assert back == cfg
    assert type(back.hidden_sizes) is tuple
    assert isinstance(data["hidden_sizes"], list)


def test_from_json_dict_rejects_unknown_field():
    data = to_json_dict(PPOConfig())
    data["bogus"] = 1
    with pytest.raises(ConfigError, match="bogus"):
        from_json_dict(PPOConfig, data)


def test_configs_are_frozen():
    cfg = PPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 0.1  # type: ignore[misc]
    assert cfg.lr == 1e-3
