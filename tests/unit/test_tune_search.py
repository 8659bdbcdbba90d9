"""``--search`` strings parsed into exact search dims, checked against the config, and turned
into Tune's domains; schedulers by name; a trial's placement group from its config."""

from __future__ import annotations

import pytest
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining
from ray.tune.schedulers.pbt import _explore

from jaxflow.api.registry import get_algorithm
from jaxflow.config import ConfigError, make_config
from jaxflow.tune import SearchDim, make_scheduler, parse_search, placement_for, search_space, trainable

PPO = get_algorithm("PPO").config_cls


@pytest.mark.parametrize(
    "text, expected",
    [
        ("lr=loguniform(1e-4,1e-2)", SearchDim("lr", "loguniform", (1e-4, 1e-2))),
        (" optimizer.lr = uniform( 0.001 , 0.01 ) ", SearchDim("optimizer.lr", "uniform", (0.001, 0.01))),
        ("num_epochs=randint(2,9)", SearchDim("num_epochs", "randint", (2, 9))),
        ("num_epochs=choice(2,4)", SearchDim("num_epochs", "choice", (2, 4))),  # ints: the field's type
        ("gamma=grid_search(0.9,0.99)", SearchDim("gamma", "grid_search", (0.9, 0.99))),
        ("env=choice(CartPole-v1,Acrobot-v1)", SearchDim("env", "choice", ("CartPole-v1", "Acrobot-v1"))),
    ],
)
def test_parse_search_gives_exact_dims(text, expected):
    dim = parse_search(PPO, text)
    assert dim == expected
    assert [type(v) for v in dim.values] == [type(v) for v in expected.values]


def test_dims_become_tunes_domains():
    log = SearchDim("lr", "loguniform", (1e-4, 1e-2)).domain()
    assert (type(log).__name__, log.lower, log.upper, type(log.sampler).__name__) == (
        "Float",
        1e-4,
        1e-2,
        "_LogUniform",
    )
    ints = SearchDim("num_epochs", "randint", (2, 9)).domain()
    assert (type(ints).__name__, ints.lower, ints.upper) == ("Integer", 2, 9)
    assert SearchDim("num_epochs", "choice", (2, 4)).domain().categories == [2, 4]
    assert SearchDim("gamma", "grid_search", (0.9, 0.99)).domain() == tune.grid_search([0.9, 0.99])
    # randint's HIGH is excluded: the config is probed at its last included value
    assert SearchDim("num_epochs", "randint", (2, 9)).probes() == (2, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("lr=loguniform(1e-4,1e-2", "--search 'lr=loguniform(1e-4,1e-2' does not parse; write FIELD=loguniform"),
        ("lr", "--search 'lr' does not parse"),
        ("lr=normal(0,1)", "unknown kind 'normal'; write FIELD=loguniform(LOW,HIGH)"),
        ("lrr=uniform(0.1,0.2)", "has no field 'lrr'. Did you mean 'lr'?"),
        ("lr=loguniform(1e-4)", "loguniform takes two floats (LOW,HIGH)"),
        ("lr=uniform(a,b)", "uniform takes two floats (LOW,HIGH)"),
        ("num_epochs=randint(1.5,3)", "randint takes two ints (LOW,HIGH)"),
        ("lr=loguniform(0,1e-2)", "loguniform needs 0 < LOW < HIGH"),
        ("lr=uniform(0.2,0.1)", "uniform needs LOW < HIGH"),
        ("lr=choice(0.1,,0.2)", "an empty value"),
        ("num_epochs=choice(2,two)", "PPOConfig.num_epochs must be int, got 'two'"),
    ],
)
def test_bad_search_strings_are_refused_naming_them(text, message):
    with pytest.raises(ConfigError) as e:
        parse_search(PPO, text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_search_space_probes_the_config_at_each_bound():
    fixed = {"env": "CartPole-v1", "minibatch_size": 128}
    assert search_space(PPO, ["lr=loguniform(1e-4,1e-2)"], fixed) == [SearchDim("lr", "loguniform", (1e-4, 1e-2))]
    with pytest.raises(ConfigError, match=r"--search lr=uniform\(-0.1, 0.1\): at -0.1, PPOConfig.lr must satisfy 0 <"):
        search_space(PPO, ["lr=uniform(-0.1,0.1)"], fixed)
    with pytest.raises(ConfigError, match=r"at 256, minibatch_size \(256\) must be <= train_batch_size \(128\)"):
        search_space(PPO, ["minibatch_size=choice(64,256)"], {"train_batch_size": 128})
    with pytest.raises(ConfigError, match="the field is searched twice"):
        search_space(PPO, ["lr=uniform(0.1,0.2)", "optimizer.lr=uniform(0.1,0.2)"], fixed)
    with pytest.raises(ConfigError, match="the field is also fixed"):
        search_space(PPO, ["num_workers=choice(0,1)"], {"rollout.num_workers": 0})


def test_schedulers_by_name():
    dims = [SearchDim("lr", "loguniform", (1e-4, 1e-2))]
    assert type(make_scheduler("fifo", dims, {}, 1, PPO)) is FIFOScheduler
    asha = make_scheduler("asha", dims, {"training_iteration": 8.0}, 2, PPO)
    assert isinstance(asha, ASHAScheduler)
    assert [t for t, _ in asha._brackets[0]._rungs] == [8, 4, 2]  # cuts at 2 and 4 (max_t 8 ends the trial)
    pbt = make_scheduler("pbt", dims, {}, 3, PPO)
    assert isinstance(pbt, PopulationBasedTraining) and pbt._perturbation_interval == 3
    with pytest.raises(ConfigError, match=r"--scheduler 'hyperband' is not one of \['fifo', 'asha', 'pbt'\]"):
        make_scheduler("hyperband", dims, {}, 1, PPO)
    with pytest.raises(ConfigError, match="asha needs --stop training_iteration=N"):
        make_scheduler("asha", dims, {"time_s": 60.0}, 1, PPO)
    with pytest.raises(ConfigError, match=r"not grid_search: \['gamma'\]"):
        make_scheduler("pbt", [SearchDim("gamma", "grid_search", (0.9, 0.99))], {}, 1, PPO)


def test_pbt_perturbations_stay_within_the_fields_bounds():
    """Tune's own explore step (times 0.8 or 1.2), run 40 times from gamma 0.999 and
    num_epochs 1: without the clamp a third of the gammas pass 1 (the trial would fail); with
    it they stop at 1 (UNIT's inclusive bound) and num_epochs at 1 (POSITIVE, an integer)."""
    dims = [SearchDim("gamma", "uniform", (0.95, 0.999)), SearchDim("num_epochs", "randint", (1, 4))]
    pbt = make_scheduler("pbt", dims, {}, 1, PPO)
    parent = {"gamma": 0.999, "num_epochs": 1}
    mutations, factors = pbt._hyperparam_mutations, pbt._perturbation_factors
    raw = [_explore(parent, mutations, 0.0, factors, None)[0] for _ in range(40)]
    kept = [_explore(parent, mutations, 0.0, factors, pbt._custom_explore_fn)[0] for _ in range(40)]
    assert any(c["gamma"] > 1 for c in raw)
    assert sorted({c["gamma"] for c in kept}) == pytest.approx([0.999 * 0.8, 1.0])
    assert {c["num_epochs"] for c in kept} == {1}  # int(1 * 0.8) = 0 is moved to 1
    run = trainable("PPO", env="CartPole-v1").run_config
    assert all(run(c).gamma <= 1 for c in kept)


def test_a_trials_placement_group_holds_its_driver_workers_and_shards():
    ppo = get_algorithm("PPO")
    assert placement_for(make_config(ppo.config_cls, num_workers=0), ppo).bundles == [{"CPU": 1.0}]
    spread = make_config(ppo.config_cls, num_workers=2, num_cpus_per_worker=0.5, placement_strategy="spread")
    group = placement_for(spread, ppo)
    assert (group.bundles, group.strategy) == ([{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}], "SPREAD")
    apex = get_algorithm("APEX")
    config = make_config(apex.config_cls, num_workers=1, num_cpus_per_replay_shard=0.25)
    assert placement_for(config, apex).bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 0.25}, {"CPU": 0.25}]
    device = make_config(ppo.config_cls, env="gymnax/CartPole-v1", mode="device", num_workers=4)
    assert placement_for(device, ppo).bundles == [{"CPU": 1.0}]


def test_jaxflow_tune_loads_on_first_use():
    import jaxflow
    from jaxflow.tune import trainable

    assert jaxflow.tune.trainable is trainable and "tune" in dir(jaxflow)
