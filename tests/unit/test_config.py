"""Config validation, --set parsing and JSON round trips (jaxflow.config + algorithm configs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jaxflow.algorithms.a2c import A2CConfig
from jaxflow.algorithms.a3c import A3CConfig
from jaxflow.algorithms.apex import APEXConfig
from jaxflow.algorithms.appo import APPOConfig
from jaxflow.algorithms.dqn import DQNConfig
from jaxflow.algorithms.impala import IMPALAConfig
from jaxflow.algorithms.maml import MAMLConfig
from jaxflow.algorithms.ppo import PPOConfig
from jaxflow.config import (
    ConfigError,
    DeviceConfig,
    RolloutConfig,
    from_json_dict,
    load_config_file,
    make_config,
    replace_config,
    resolve,
    to_json_dict,
    with_overrides,
)
from jaxflow.config.fields import POSITIVE, UNIT, Check


def test_defaults_are_valid():
    cfg = PPOConfig()
    assert cfg.optimizer.lr == 1e-3 and cfg.clip_eps == 0.2 and cfg.hidden_sizes == (64, 64)


@pytest.mark.parametrize("cls", [PPOConfig, A2CConfig])
def test_negative_lr_names_lr(cls):
    with pytest.raises(ConfigError, match=r"\.lr must satisfy 0 < value, got -0\.1"):
        make_config(cls, lr=-0.1)


@pytest.mark.parametrize("field", ["lr", "gamma", "clip_eps", "vf_clip"])
def test_nan_violates_every_bound(field):
    with pytest.raises(ConfigError, match=rf"PPOConfig\.{field} must be a finite number, got nan"):
        make_config(PPOConfig, **{field: float("nan")})
    with pytest.raises(ConfigError, match=rf"PPOConfig\.{field} must be a finite number, got nan"):
        with_overrides(PPOConfig(), {field: "nan"})


def test_zero_clip_eps_is_rejected():
    # clip_eps is a strict lower bound: 0 would make PPO's ratio clip a no-op trust region.
    with pytest.raises(ConfigError, match=r"PPOConfig\.clip_eps"):
        PPOConfig(clip_eps=0.0)
    assert PPOConfig(clip_eps=1e-6).clip_eps == 1e-6


def test_bad_on_worker_failure_lists_allowed_values():
    with pytest.raises(ConfigError) as err:
        make_config(PPOConfig, on_worker_failure="bogus")
    msg = str(err.value)
    assert "on_worker_failure" in msg and "'bogus'" in msg
    for allowed in ("'raise'", "'ignore'", "'restart'"):
        assert allowed in msg


def test_cross_field_constraint():
    with pytest.raises(ConfigError, match=r"minibatch_size \(512\) must be <= train_batch_size \(256\)"):
        PPOConfig(minibatch_size=512, train_batch_size=256)


def test_env_groups_need_the_ale_backend_and_must_divide_the_envs():
    with pytest.raises(ConfigError, match=r"num_env_groups=2 needs vector_env='ale'"):
        make_config(PPOConfig, num_env_groups=2)
    with pytest.raises(ConfigError, match=r"num_env_groups=3 must divide num_envs_per_worker=8"):
        make_config(PPOConfig, env="ALE/Pong-v5", vector_env="ale", num_envs_per_worker=8, num_env_groups=3)
    with pytest.raises(ConfigError, match=r"PPOConfig\.num_env_groups must satisfy"):
        make_config(PPOConfig, num_env_groups=0)
    assert make_config(PPOConfig, env="ALE/Pong-v5", vector_env="ale", num_env_groups=4).rollout.num_env_groups == 4


def test_train_batch_size_bounds_the_minibatch_only_in_ray_mode():
    # Device mode trains on num_envs x rollout_fragment_length (2048 x 32 here), not on
    # train_batch_size; its program checks the minibatch against that batch instead.
    assert make_config(PPOConfig, env="gymnax/CartPole-v1", num_envs=2048, minibatch_size=16384).minibatch_size == 16384
    for fields in ({"env": "gymnax/CartPole-v1", "mode": "ray"}, {"env": "CartPole-v1"}):
        with pytest.raises(ConfigError, match=r"minibatch_size \(16384\) must be <= train_batch_size \(1024\)"):
            make_config(PPOConfig, minibatch_size=16384, **fields)


def test_with_overrides_parses_declared_types():
    base = PPOConfig()
    cfg = with_overrides(base, {"lr": "3e-4", "hidden_sizes": "32,32", "num_workers": "0"})
    assert cfg.optimizer.lr == 3e-4 and type(cfg.optimizer.lr) is float
    assert cfg.hidden_sizes == (32, 32) and all(type(h) is int for h in cfg.hidden_sizes)
    assert cfg.rollout.num_workers == 0 and type(cfg.rollout.num_workers) is int
    assert type(cfg) is PPOConfig
    # Only the overridden fields change, and the original is untouched.
    changes = {"lr": base.optimizer.lr, "hidden_sizes": base.hidden_sizes, "num_workers": base.rollout.num_workers}
    assert replace_config(cfg, **changes) == base
    assert base.optimizer.lr == 1e-3


def test_with_overrides_parses_literal_and_dict_fields():
    cfg = with_overrides(PPOConfig(), {"on_worker_failure": "restart", "env_config": '{"crash_at_step": 5}'})
    assert cfg.rollout.on_worker_failure == "restart"
    assert cfg.env_config == {"crash_at_step": 5}


def test_with_overrides_still_validates():
    with pytest.raises(ConfigError, match=r"\.lr must satisfy"):
        with_overrides(PPOConfig(), {"lr": "-1"})


def test_unknown_field_suggests_the_closest():
    with pytest.raises(ConfigError) as err:
        with_overrides(PPOConfig(), {"lrr": "0.1"})
    msg = str(err.value)
    assert "'lrr'" in msg
    assert "Did you mean 'lr'?" in msg


def test_every_way_of_building_a_config_refuses_an_unknown_name_with_one_error():
    """--set, make_config, replace_config, Algorithm.build and the constructor itself: the same
    ConfigError (closest names, every field), never the dataclass's bare TypeError."""
    from jaxflow import Algorithm

    with pytest.raises(ConfigError) as err:
        with_overrides(PPOConfig(), {"lrr": "0.1"})
    expected = str(err.value)
    for build in (
        lambda: make_config(PPOConfig, lrr=0.1),
        lambda: replace_config(PPOConfig(), lrr=0.1),
        lambda: Algorithm.build("PPO", lrr=0.1),
        lambda: Algorithm.build(PPOConfig(), lrr=0.1),
        lambda: PPOConfig(lrr=0.1),
    ):
        with pytest.raises(ConfigError) as err:
            build()
        assert str(err.value) == expected
    with pytest.raises(ConfigError, match=r"^RolloutConfig has no field 'num_worker'\. Did you mean 'num_workers', "):
        RolloutConfig(num_worker=2)
    with pytest.raises(ConfigError, match=r"'num_workers' lives in the group 'rollout'; make_config\(PPOConfig"):
        PPOConfig(num_workers=2)
    with pytest.raises(ConfigError, match=r"replace_config takes a config object such as PPOConfig\(\), got <class"):
        Algorithm.build(PPOConfig, lr=0.1)
    with pytest.raises(ConfigError, match=r"got the class PPOConfig; pass PPOConfig\(\)"):
        Algorithm.build(PPOConfig)
    with pytest.raises(ConfigError, match=r"PPOConfig\.optimizer must be OptimizerConfig, got None"):
        make_config(PPOConfig, optimizer=None, lr=0.1)


def test_wrong_type_names_the_field():
    with pytest.raises(ConfigError, match=r"PPOConfig\.num_workers must be int, got 'two'"):
        with_overrides(PPOConfig(), {"num_workers": "two"})


def test_wrong_python_type_on_construction_names_the_field():
    with pytest.raises(ConfigError, match=r"\.num_workers must be int"):
        make_config(PPOConfig, num_workers=1.5)
    with pytest.raises(ConfigError, match=r"\.num_workers must be int"):
        make_config(PPOConfig, num_workers=True)  # bool is an int subclass but never a count


@pytest.mark.parametrize(
    "cfg",
    [
        PPOConfig(),
        make_config(
            PPOConfig,
            lr=3e-4,
            hidden_sizes=(32, 16, 8),
            env_config={"a": 1, "b": [1, 2]},
            vf_clip=0.5,
            on_worker_failure="ignore",
        ),
        make_config(A2CConfig, num_workers=0, gamma=0.9),
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
        cfg.optimizer.lr = 0.1  # type: ignore[misc]
    assert cfg.optimizer.lr == 1e-3


# --- groups: rollout, device and optimizer settings, named flat or dotted ------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_workers": "4", "lr": "0.01", "num_envs": "32"},
        {"rollout.num_workers": "4", "optimizer.lr": "0.01", "device.num_envs": "32"},
    ],
)
def test_set_names_flat_or_dotted_reach_their_group(overrides):
    cfg = with_overrides(PPOConfig(), overrides)
    assert (cfg.rollout.num_workers, cfg.optimizer.lr, cfg.device.num_envs) == (4, 0.01, 32)
    # The rest of each group keeps PPO's defaults.
    assert (cfg.rollout.num_envs_per_worker, cfg.rollout.rollout_fragment_length) == (16, 32)
    assert cfg.optimizer.max_grad_norm == 0.5 and cfg.device.iterations_per_call == 10
    assert cfg == make_config(PPOConfig, num_workers=4, lr=0.01, num_envs=32)


def test_resolve_names_where_each_setting_lives():
    assert resolve(PPOConfig, "lr") == ("optimizer", "lr")
    assert resolve(PPOConfig, "optimizer.lr") == ("optimizer", "lr")
    assert resolve(PPOConfig, "num_env_groups") == ("rollout", "num_env_groups")
    assert resolve(PPOConfig, "member_batching") == ("device", "member_batching")
    assert resolve(PPOConfig, "clip_eps") == ("clip_eps",)
    assert resolve(PPOConfig, "rollout") == ("rollout",)


def test_replace_config_changes_one_group_field_and_leaves_the_original():
    base = PPOConfig()
    cfg = replace_config(base, num_workers=0, **{"optimizer.max_grad_norm": 2.0}, gamma=0.9)
    assert (cfg.rollout.num_workers, cfg.optimizer.max_grad_norm, cfg.gamma) == (0, 2.0, 0.9)
    assert cfg.optimizer.lr == 1e-3 and cfg.rollout.num_envs_per_worker == 16
    assert (base.rollout.num_workers, base.optimizer.max_grad_norm, base.gamma) == (2, 0.5, 0.99)
    assert replace_config(base, rollout=RolloutConfig(num_workers=5)).rollout == RolloutConfig(num_workers=5)


def test_group_errors_name_the_config_and_the_field():
    with pytest.raises(ConfigError, match=r"PPOConfig\.num_workers must satisfy 0 <= value, got -1"):
        make_config(PPOConfig, num_workers=-1)
    with pytest.raises(ConfigError, match=r"PPOConfig\.lr must satisfy 0 < value, got 0"):
        replace_config(PPOConfig(), **{"optimizer.lr": 0})
    with pytest.raises(ConfigError, match=r"RolloutConfig\.num_workers must satisfy"):
        RolloutConfig(num_workers=-1)
    with pytest.raises(ConfigError, match=r"PPOConfig\.rollout must be RolloutConfig"):
        PPOConfig(rollout={"num_workers": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["num_worker", "rollout.num_worker"])
def test_unknown_names_suggest_the_closest_and_list_the_fields(name):
    with pytest.raises(ConfigError) as err:
        with_overrides(PPOConfig(), {name: "1"})
    msg = str(err.value)
    assert f"PPOConfig has no field {name!r}" in msg
    assert f"Did you mean '{name}s', " in msg  # the closest first
    fields = msg.split("Fields: ")[1]
    for allowed in ("num_workers", "lr", "iterations_per_call", "clip_eps", "gamma"):
        assert allowed in fields.rstrip(".").split(", ")
    with pytest.raises(ConfigError, match=r"PPOConfig has no field 'optimizer\.gamma'"):
        make_config(PPOConfig, **{"optimizer.gamma": 0.9})


def test_a_config_with_groups_round_trips_through_json():
    cfg = make_config(
        PPOConfig, num_workers=0, num_env_groups=2, vector_env="ale", env="ALE/Pong-v5", lr=5e-4, num_seeds=3
    )
    data = json.loads(json.dumps(to_json_dict(cfg)))
    assert data["rollout"]["num_workers"] == 0 and data["optimizer"]["lr"] == 5e-4 and data["device"]["num_seeds"] == 3
    back = from_json_dict(PPOConfig, data)
    assert back == cfg and type(back.rollout) is RolloutConfig


def test_a_flat_saved_config_still_loads():
    # Configs saved before the groups existed name every field flat.
    flat = {"env": "CartPole-v1", "num_workers": 0, "lr": 5e-4, "hidden_sizes": [32], "iterations_per_call": 4}
    cfg = from_json_dict(PPOConfig, flat)
    assert cfg == make_config(PPOConfig, num_workers=0, lr=5e-4, hidden_sizes=(32,), iterations_per_call=4)


def test_config_files_take_flat_dotted_and_nested_names(tmp_path):
    path = tmp_path / "ppo.json"
    path.write_text(json.dumps({"num_workers": 1, "optimizer.lr": 0.01, "device": {"num_envs": 64}, "clip_eps": 0.1}))
    cfg = load_config_file(PPOConfig, str(path))
    assert (cfg.rollout.num_workers, cfg.optimizer.lr, cfg.device.num_envs, cfg.clip_eps) == (1, 0.01, 64, 0.1)
    path.write_text(json.dumps({"num_wrkers": 1}))
    with pytest.raises(ConfigError, match=r"unknown keys \['num_wrkers'\]; a PPOConfig has \[.*'num_workers'"):
        load_config_file(PPOConfig, str(path))


@pytest.mark.parametrize(
    "cls, rollout, optimizer",
    [
        (PPOConfig, (2, 16, 32), (1e-3, 0.5)),
        (A2CConfig, (2, 8, 16), (2e-3, 0.5)),
        (A3CConfig, (2, 8, 16), (1e-3, 0.5)),
        (IMPALAConfig, (2, 8, 32), (1e-3, 0.5)),
        (APPOConfig, (2, 8, 32), (1e-3, 0.5)),
        (DQNConfig, (1, 8, 16), (1e-3, 10.0)),
        (APEXConfig, (2, 8, 16), (1e-3, 10.0)),
        (MAMLConfig, (2, 8, 64), (1e-3, 10.0)),
    ],
)
def test_each_algorithm_keeps_its_group_defaults(cls, rollout, optimizer):
    cfg = cls()
    got = (cfg.rollout.num_workers, cfg.rollout.num_envs_per_worker, cfg.rollout.rollout_fragment_length)
    assert got == rollout
    assert (cfg.optimizer.lr, cfg.optimizer.max_grad_norm) == optimizer
    assert cfg.device == DeviceConfig()
    # A flat change to one field keeps the algorithm's other defaults of that group.
    assert make_config(cls, num_workers=3).rollout.rollout_fragment_length == rollout[2]


@pytest.mark.parametrize("field", ["lr", "optimizer.lr"])
def test_a_sweep_over_lr_validates_each_value(field):
    cfg = make_config(PPOConfig, env="gymnax/CartPole-v1", sweep={field: [1e-4, 1e-2]})
    assert cfg.device.sweep == {field: [1e-4, 1e-2]}
    with pytest.raises(ConfigError, match=r"PPOConfig\.lr must satisfy 0 < value, got -0\.1"):
        make_config(PPOConfig, env="gymnax/CartPole-v1", sweep={field: [1e-4, -0.1]})


def test_a_sweep_over_a_non_float_field_fails():
    with pytest.raises(ConfigError, match=r"'num_epochs' is not a float field; only numeric fields \(.*\blr\b"):
        make_config(PPOConfig, sweep={"num_epochs": [1.0, 2.0]})
    with pytest.raises(ConfigError, match=r"'rollout\.num_workers' is not a float field"):
        make_config(PPOConfig, sweep={"rollout.num_workers": [1.0, 2.0]})
    with pytest.raises(ConfigError, match=r"PPOConfig\.sweep: no field 'lrr'\. Fields: env, "):
        make_config(PPOConfig, sweep={"lrr": [1.0]})


@pytest.mark.parametrize("field", ["lr", "max_grad_norm", "worker_timeout_s", "gamma", "ent_coef"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_infinite_and_nan_values_are_refused_where_a_number_is_meant(field, value):
    with pytest.raises(ConfigError, match=rf"PPOConfig.{field} must be a finite number, got {value!r}"):
        make_config(PPOConfig, **{field: value})


def test_a_list_is_taken_where_a_tuple_is_meant():
    cfg = make_config(PPOConfig, hidden_sizes=[32, 16])
    assert cfg.hidden_sizes == (32, 16) and type(cfg.hidden_sizes) is tuple
    assert cfg == make_config(PPOConfig, hidden_sizes=(32, 16)) and hash(cfg.hidden_sizes) == hash((32, 16))
    with pytest.raises(ConfigError, match=r"hidden_sizes must be tuple"):
        make_config(PPOConfig, hidden_sizes=["wide"])


def test_placement_settings_parse_from_the_command_line_and_round_trip():
    overrides = {
        "custom_resources_per_worker": '{"rollout": 1}',
        "custom_resources_per_replay_shard": '{"replay": 0.5}',
        "num_cpus_per_replay_shard": "1",
        "placement_strategy": "spread",
    }
    cfg = with_overrides(APEXConfig(), overrides)
    assert cfg.rollout.custom_resources_per_worker == {"rollout": 1}
    assert cfg.custom_resources_per_replay_shard == {"replay": 0.5} and cfg.num_cpus_per_replay_shard == 1.0
    assert cfg.rollout.placement_strategy == "spread"
    assert from_json_dict(APEXConfig, json.loads(json.dumps(to_json_dict(cfg)))) == cfg


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"custom_resources_per_worker": {"CPU": 1}},
            r"custom_resources_per_worker names custom Ray resources .* 'CPU'",
        ),
        (
            {"custom_resources_per_worker": {"rollout": 0}},
            r"custom_resources_per_worker\['rollout'\] must be a number above 0",
        ),
        (
            {"custom_resources_per_replay_shard": {"replay": float("inf")}},
            r"APEXConfig\.custom_resources_per_replay_shard",
        ),
        ({"custom_resources_per_replay_shard": {"replay": "1"}}, r"must be a number above 0, got '1'"),
        ({"placement_strategy": "strict_spread"}, r"placement_strategy must be one of 'pack', 'spread'"),
        ({"num_cpus_per_replay_shard": -1}, r"num_cpus_per_replay_shard must satisfy"),
    ],
)
def test_bad_placement_settings_fail_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        make_config(APEXConfig, **overrides)
    assert "\n" not in str(error.value)


def test_a_checks_nearest_allowed_value():
    assert (UNIT.nearest(1.188), UNIT.nearest(-0.5), UNIT.nearest(0.3)) == (1.0, 0.0, 0.3)
    assert type(UNIT.nearest(2)) is int and UNIT.nearest(2) == 1
    assert (POSITIVE.nearest(0), POSITIVE.nearest(-3), POSITIVE.nearest(0.0)) == (1, 1, 5e-324)
    below_one = Check(high=1.0, high_inclusive=False)
    assert below_one.nearest(1.0) == 1.0 - 2**-53 and below_one(below_one.nearest(1.2))
    assert Check(low=2, high=5).nearest(9) == 5


@pytest.mark.parametrize(
    "overrides",
    [{"num_replay_shards": 2}, {"num_cpus_per_replay_shard": 1.0}, {"custom_resources_per_replay_shard": {"r": 1}}],
)
def test_replay_in_driver_needs_one_shard_asking_for_nothing(overrides):
    with pytest.raises(ConfigError, match=r"replay_in_driver=True keeps one replay in the driver's process: it needs"):
        make_config(DQNConfig, replay_in_driver=True, **overrides)
    assert make_config(DQNConfig, **overrides).replay_in_driver is False
