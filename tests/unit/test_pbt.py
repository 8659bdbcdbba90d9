"""Population-based training of device-mode members: ranking, explore's draws, an exploit
step copied bit for bit, the errors of a PBT config, and the best member a checkpoint marks."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jaxflow import Algorithm, ConfigError
from jaxflow.algorithms import PPOConfig
from jaxflow.api import checkpoint, checkpoint_state, cli
from jaxflow.api.algorithm import load_policy
from jaxflow.api.export import export_policy, flatten_arrays
from jaxflow.api.loop import train
from jaxflow.config import make_config
from jaxflow.ondevice.pbt import NEVER, explore, recent_scores, truncation_selection

CARTPOLE = "gymnax/CartPole-v1"


def test_truncation_selection_on_a_hand_checked_ranking():
    # ranked: 6 (60), 1 (50), 4 (40), 2 (30), 5 (20), 0 (10), 7 (0), 3 (NaN: no episode yet)
    scores = np.array([10.0, 50, 30, np.nan, 40, 20, 60, 0])
    top, bottom = truncation_selection(scores, 0.25)  # floor(8 * 0.25) = 2 each
    assert top.tolist() == [6, 1] and bottom.tolist() == [7, 3]
    top, bottom = truncation_selection(scores, 0.5)
    assert top.tolist() == [6, 1, 4, 2] and bottom.tolist() == [5, 0, 7, 3]
    top, bottom = truncation_selection(np.array([3.0, 3.0, 1.0]), 0.25)  # at least one; a tie goes by index
    assert top.tolist() == [0] and bottom.tolist() == [2]


def test_explore_draws_its_factors_and_resamples_at_the_stated_rates():
    """2,000 draws with resample_prob 0.25: the resampled fraction within 4 standard deviations
    (0.0097) of 0.25, and 0.8 and 1.2 each half of the rest within 4 sd."""
    rng = np.random.default_rng(0)
    draws = np.array([explore(1.0, [5.0, 7.0], 0.25, rng) for _ in range(2000)])
    assert set(np.round(draws, 6)) == {0.8, 1.2, 5.0, 7.0}
    resampled = np.isin(draws, [5.0, 7.0])
    assert abs(resampled.mean() - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 2000)
    kept = draws[~resampled]
    assert abs(np.mean(kept == 0.8) - 0.5) < 4 * np.sqrt(0.25 / len(kept))


@pytest.fixture(scope="module")
def population():
    """4 PPO members (lr 1e-3 and 1e-2, 2 seeds each) under PBT of lr and ent_coef, a step every
    2 iterations of 1 per call; built (and compiled) once for the tests below."""
    return Algorithm.build(
        "PPO",
        env=CARTPOLE,
        num_envs=8,
        minibatch_size=64,
        iterations_per_call=1,
        num_seeds=2,
        sweep={"lr": [1e-3, 1e-2]},
        ent_coef=0.01,
        pbt=("lr", "ent_coef"),
        pbt_interval=2,
    )


def test_an_exploit_step_copies_parameters_and_optimizer_state_bit_for_bit(population):
    """One iteration, then the PBT step: the scores are the mean returns of the episodes each
    member ended; the bottom member now holds its source's parameters, optimizer state and step
    bit for bit (its own RNG kept), and its lr (in the loss's config and in the optimizer) and
    ent_coef are the source's times 0.8 or 1.2 or a resample; the others are untouched; the next call does not recompile."""
    algo = population  # no step after the first iteration (pbt_interval 2): the test takes it
    program = algo.program
    out = program.call()
    compiled = program._run._cache_size()
    before = program.get_state()
    expected = [np.nanmean(r) for r in out["episode_returns"].reshape(4, -1)]
    np.testing.assert_allclose(recent_scores(before.pbt), expected, rtol=1e-6)
    source, values = program.pbt.decide(recent_scores(before.pbt), before.hyper, 1)
    top, bottom = truncation_selection(recent_scores(before.pbt), 0.25)
    assert len(bottom) == 1 and source[bottom[0]] == top[0] and np.sum(source != np.arange(4)) == 1
    program.state = program.pbt.apply(program.state, 1)
    after = program.get_state()

    j, src = int(bottom[0]), int(top[0])
    for name, tree in (("params", lambda s: s.train.params), ("opt_state", lambda s: s.train.opt_state.inner_state)):
        for a, b in zip(jax.tree.leaves(tree(after)), jax.tree.leaves(tree(before))):
            np.testing.assert_array_equal(a[j], b[src], err_msg=name)
    assert (
        after.train.step[j] == before.train.step[src]
        and after.train.opt_state.count[j] == before.train.opt_state.count[src]
    )
    np.testing.assert_array_equal(after.train.rng, before.train.rng)
    for k in ("lr", "ent_coef"):
        ratio = float(after.hyper[k][j]) / float(before.hyper[k][src])
        initial = {"lr": [1e-3, 1e-2], "ent_coef": [0.01]}[k]
        assert any(abs(ratio - f) < 1e-6 for f in (0.8, 1.2)) or any(
            np.isclose(after.hyper[k][j], v, rtol=1e-6) for v in initial
        ), (k, ratio)
        assert np.float32(values[k][j]) == after.hyper[k][j]
    assert after.train.opt_state.hyperparams["lr"][j] == after.hyper["lr"][j]
    others = [i for i in range(4) if i != j]
    for a, b in zip(jax.tree.leaves((after.train, after.hyper)), jax.tree.leaves((before.train, before.hyper))):
        np.testing.assert_array_equal(np.asarray(a)[others], np.asarray(b)[others])
    assert after.pbt.parent.tolist() == [src if i == j else NEVER for i in range(4)]
    assert after.pbt.copied_at.tolist() == [1 if i == j else NEVER for i in range(4)]
    assert after.pbt.episodes.tolist() == [0.0] * 4

    result = algo.train()  # the next call reaches iteration 2: a step, and the lineage in the results
    assert program._run._cache_size() == compiled  # the new values are arguments: nothing recompiled
    assert result["pbt"][f"member_{j}/copied_at"] in (1, 2) and 0 <= result["pbt"]["best_member"] < 4
    assert set(result["pbt"]) >= {f"member_{i}/{k}" for i in range(4) for k in ("lr", "ent_coef", "parent")}


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(pbt=("lr",)), "at least 2 members .* got 1"),
        (dict(pbt=("hidden_sizes",), num_seeds=2), "'hidden_sizes' is not a hyperparameter .* can: gamma, lr"),
        (dict(pbt=("num_envs_per_worker",), num_seeds=2), "not a hyperparameter"),
        (dict(pbt=("lrr",), num_seeds=2), "'lrr' is not a hyperparameter"),
        (dict(pbt=("lr", "optimizer.lr"), num_seeds=2), "names a field twice"),
        (dict(pbt=("lr",), num_seeds=2, schedules={"lr": [[0, 1e-3]]}), "'lr' follows a schedule"),
        (dict(pbt_quantile=0.75), "pbt_quantile"),
    ],
)
def test_pbt_config_errors_name_the_field(changes, match):
    with pytest.raises(ConfigError, match=match):
        make_config(PPOConfig, **changes)


def test_pbt_needs_device_mode():
    with pytest.raises(ConfigError, match="pbt need device mode"):
        Algorithm.build("PPO", env="CartPole-v1", num_seeds=2, pbt=("lr",), mode="ray")


def test_perturbed_values_take_effect_in_the_compiled_update(population):
    """Four copies of one member's state, the third with twice its lr and the fourth with twice
    its ent_coef, run one iteration in the same compiled call: the first two stay equal bit for
    bit, the other two move elsewhere."""
    program = population.program
    program.call()  # compiled (already, after the test above)
    # Built from the device state with array operations, which keep its weak types: the call
    # below reuses the compiled function.
    same = jax.tree.map(lambda x: x[jnp.zeros(4, jnp.int32)], program.state)
    twice = {"lr": jnp.float32([1, 1, 2, 1]), "ent_coef": jnp.float32([1, 1, 1, 2])}
    hyper = {k: v * twice[k] for k, v in same.hyper.items()}
    opt = same.train.opt_state._replace(hyperparams=dict(same.train.opt_state.hyperparams, lr=hyper["lr"]))
    iteration = jnp.full(4, 2 * program.config.device.pbt_interval, jnp.int32)  # the call ends between PBT steps
    program.set_state(same._replace(train=same.train._replace(opt_state=opt), hyper=hyper, iteration=iteration))
    compiled = program._run._cache_size()
    program.call()
    params = [jax.tree.leaves(program.get_weights(i)) for i in range(4)]
    for a, b in zip(params[0], params[1]):
        np.testing.assert_array_equal(a, b)
    for other in params[2:]:
        assert any(not np.array_equal(a, b) for a, b in zip(params[0], other))
    assert program._run._cache_size() == compiled


def test_a_checkpoint_marks_the_best_member_which_evaluate_and_export_play(population, tmp_path, capsys):
    """Trained on for 4 iterations (2 PBT steps) by the run's loop, checkpointed at the end:
    ``meta.json`` marks the member of highest recent return (the results' ``best_member``,
    the argmax of the restored state's records); ``load_policy``, ``jaxflow evaluate`` and
    ``export`` play that member (its parameters sliced out by hand, bit for bit, and its greedy
    actions), or member N with ``--member N``; TensorBoard holds each member's hyperparameters
    and returns as the results do."""
    logdir, out = str(tmp_path / "run"), str(tmp_path / "exported")
    result = train(
        population, {"training_iteration": population.iteration + 4}, logdir, checkpoint_every=0, verbose=False
    )
    ckpt = checkpoint.latest(logdir)
    marked = checkpoint.load_meta(ckpt)["pbt"]
    state = checkpoint_state.restore_state(ckpt, population.program.get_state())
    recent = [result["pbt"][f"member_{i}/recent_return"] for i in range(4)]
    best = marked["best_member"]
    assert len({r for r in recent if np.isfinite(r)}) > 1  # an argmax that picks one member out
    assert (
        best == int(np.nanargmax(recent)) == result["pbt"]["best_member"] == int(np.nanargmax(recent_scores(state.pbt)))
    )
    assert marked["member_returns"] == [None if np.isnan(r) else pytest.approx(r, rel=1e-6) for r in recent]

    def member_params(i):
        return jax.tree.map(lambda x: np.asarray(x[i]), state.train.params)

    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    for member, expected in ((None, best), ("best", best), (3 - best, 3 - best)):
        _, policy, params, _ = load_policy(logdir, member)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(member_params(expected)), strict=True):
            np.testing.assert_array_equal(a, b)
        actions = np.asarray(jax.jit(policy.greedy)(params, obs))
        np.testing.assert_array_equal(actions, population.compute_actions(obs, member=expected))

    assert cli.main(["evaluate", "--checkpoint", logdir, "--episodes", "1"]) == 0
    assert f"{CARTPOLE}, member {best} (best): greedy return over 1 episodes" in capsys.readouterr().out
    assert cli.main(["evaluate", "--checkpoint", logdir, "--episodes", "1", "--member", "4"]) == 2
    assert "holds 4 member(s), 0 to 3; member 4 is none of them" in capsys.readouterr().err
    assert cli.main(["evaluate", "--checkpoint", logdir, "--member", "first"]) == 2
    assert "--member: must be best or an integer >= 0, got 'first'" in capsys.readouterr().err
    export_policy(logdir, out)
    exported = dict(np.load(os.path.join(out, "params.npz")))
    assert exported.keys() == flatten_arrays({"params": member_params(best)}).keys()
    for name, value in flatten_arrays({"params": member_params(best)}).items():
        np.testing.assert_array_equal(exported[name], value)

    events = EventAccumulator(logdir)
    events.Reload()
    names = [m.name for m in population.program.members]  # seed=0,lr=0.001: TensorBoard's tag seed_0_lr_0.001
    tags = [name.replace("=", "_").replace(",", "_") for name in names]
    for i in range(4):
        for tag, value in [
            *((f"pbt/member_{i}/{k}", result["pbt"][f"member_{i}/{k}"]) for k in ("lr", "ent_coef", "recent_return")),
            (f"members/{tags[i]}/episode_return_mean", result["members"][names[i]]["episode_return_mean"]),
        ]:
            if np.isfinite(value):  # TensorBoard gets finite values only
                last = events.Scalars(tag)[-1]
                assert (last.step, last.value) == (result["env_steps_sampled"], pytest.approx(value, rel=1e-6)), tag
    assert events.Scalars("pbt/best_member")[-1].value == best
