"""Callbacks (issue 44): ``on_episode_end`` on Ray rollout workers and in device mode, its
metrics summarized per iteration under ``custom_metrics``; ``on_train_result`` adding a metric
that progress.jsonl logs and stopping the run; ``on_checkpoint`` given the checkpoints written;
the CLI's ``--set callbacks=MODULE:ATTR`` (remembered by ``--resume``), its refusals in one
line; ``Algorithm.restore`` making the remembered callbacks again; and a callback's bug on a
worker named by file and line."""

from __future__ import annotations

import json
import os

import pytest
from cli_process import jaxflow_process

from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.callbacks import CallbackError
from jaxflow.api.loop import train

RAY_RUN = dict(
    env="CartPole-v1",
    num_workers=2,
    num_envs_per_worker=2,
    rollout_fragment_length=64,
    train_batch_size=256,
    minibatch_size=64,
    num_epochs=1,
    metrics_num_episodes=10_000,  # the window holds every episode: its statistics are of all so far
)
STOP_AT = 2
"""The iteration the callback stops the run at, under a stop condition that would run longer."""


class Recorder:
    """Every hook: each episode's length (CartPole pays 1 a step, so its return is its length),
    worker and env; a metric and a stop from ``on_train_result``; the checkpoints it is given."""

    def __init__(self) -> None:
        self.checkpoints: list[tuple[str, bool]] = []

    def on_episode_end(self, episode):
        return {
            "len": episode.length,
            "len_sq": episode.length**2,
            "return_minus_len": episode.episode_return - episode.length,
            "worker": episode.worker_index,
            "env": episode.env_index,
            "has_info": float(isinstance(episode.info, dict)),
        }

    def on_train_result(self, algo, result):
        result["custom_metrics"]["iteration_sq"] = result["training_iteration"] ** 2
        return result["training_iteration"] >= STOP_AT

    def on_checkpoint(self, algo, path):
        self.checkpoints.append((path, os.path.isfile(os.path.join(path, "manifest.json"))))


class Lengths:
    """``on_episode_end`` alone (a class resolvable by name in this process: ``test_callbacks:Lengths``)."""

    def on_episode_end(self, episode):
        return {
            "len": episode.length,
            "no_worker": float(episode.worker_index is None),
            "no_info": float(episode.info is None),
        }


def _episode_stats_check(rows: list[dict]) -> None:
    """Each row's ``len_*`` against the episodes that ended in that iteration, found from the
    run's own statistics over all episodes so far (the window holds them all): the count from
    ``episodes``, the mean from ``episode_len_mean`` less the earlier iterations' share."""
    seen, total_len = 0, 0.0
    for row in rows:
        custom, count = row["custom_metrics"], row["episodes"] - seen
        assert count > 0
        mean = (row["episode_len_mean"] * row["episodes"] - total_len) / count
        assert custom["len_mean"] == pytest.approx(mean, rel=1e-9)
        assert custom["len_min"] >= 8 and custom["len_max"] <= 500  # CartPole's shortest and longest
        assert custom["len_sq_min"] == custom["len_min"] ** 2 and custom["len_sq_max"] == custom["len_max"] ** 2
        assert custom["len_sq_mean"] >= custom["len_mean"] ** 2  # Jensen: equal only if all lengths are equal
        assert custom["return_minus_len_min"] == custom["return_minus_len_max"] == 0.0
        seen, total_len = row["episodes"], row["episode_len_mean"] * row["episodes"]
    first = rows[0]  # the run's first iteration: its extremes are the window's
    assert first["custom_metrics"]["len_min"] == first["episode_return_min"]
    assert first["custom_metrics"]["len_max"] == first["episode_return_max"]


def test_callbacks_on_ray_workers_stop_and_checkpoint(ray_local, tmp_path):
    recorder = Recorder()
    algo = Algorithm.build("PPO", callbacks=recorder, **RAY_RUN)
    assert algo.config.callbacks == ("test_callbacks:Recorder",)
    try:
        result = train(algo, {"training_iteration": 10}, str(tmp_path), checkpoint_every=1, verbose=False)
    finally:
        algo.stop()
    assert result["training_iteration"] == STOP_AT
    assert result["stopped_by"] == "callback test_callbacks:Recorder"
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [r["custom_metrics"]["iteration_sq"] for r in rows] == [1, 4]
    _episode_stats_check(rows)
    for row in rows:  # both workers' episodes, from their 2 envs each, with gymnasium's info dicts
        custom = row["custom_metrics"]
        assert (custom["worker_min"], custom["worker_max"]) == (0, 1)
        assert custom["env_min"] >= 0 and custom["env_max"] <= 1
        assert custom["has_info_min"] == 1.0
    written = [(str(tmp_path / f"checkpoint_{i:06d}"), True) for i in (1, 2)]
    assert recorder.checkpoints == written  # the driver's own object, called once the checkpoint was complete


def test_device_mode_calls_on_episode_end_on_the_host():
    algo = Algorithm.build(
        "PPO",
        env="gymnax/CartPole-v1",
        num_envs=4,
        rollout_fragment_length=128,
        minibatch_size=128,
        num_epochs=1,
        metrics_num_episodes=10_000,
        callbacks=[Lengths],
    )
    try:
        result = algo.train()
    finally:
        algo.stop()
    custom = result["custom_metrics"]
    assert result["episodes"] > 0
    assert custom["len_mean"] == pytest.approx(result["episode_len_mean"], rel=1e-9)  # a fresh window: this call's
    assert (custom["len_min"], custom["len_max"]) == (result["episode_return_min"], result["episode_return_max"])
    assert custom["no_worker_min"] == custom["no_info_min"] == 1.0


TINY = ["--algo", "PPO", "--env", "CartPole-v1", "--num-workers", "0", "--set", "rollout_fragment_length=32"]
TINY += ["--set", "train_batch_size=64", "--set", "minibatch_size=32", "--set", "num_envs_per_worker=2", "--quiet"]
MODULE = "callbacks_under_test"
SOURCE = """
class Metrics:
    def on_episode_end(self, episode):
        return {"steps": episode.length}

    def on_train_result(self, algo, result):
        result["custom_metrics"]["from_module"] = 7.0
"""


def test_cli_callbacks_are_remembered_by_resume(tmp_path):
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    run = str(tmp_path / "run")
    argv = ["train", "--import", MODULE, "--set", f"callbacks={MODULE}:Metrics", *TINY, "--logdir", run]
    done = jaxflow_process(tmp_path, [*argv, "--stop", "training_iteration=1"])
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = jaxflow_process(tmp_path, ["train", "--resume", run, "--stop", "training_iteration=2", "--quiet"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in open(os.path.join(run, "progress.jsonl"), encoding="utf-8")]
    assert [r["training_iteration"] for r in rows] == [1, 2]
    for row in rows:  # the resumed run's callbacks too: made again from the name its checkpoint keeps
        assert row["custom_metrics"]["from_module"] == 7.0
        assert 8 <= row["custom_metrics"]["steps_min"] <= row["custom_metrics"]["steps_max"] <= 500


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("no_such_module_here:Metrics", "callbacks 'no_such_module_here:Metrics' cannot be made here: no module"),
        ("json:JSONDecoder", "callbacks 'json:JSONDecoder': JSONDecoder has none of the methods on_train_result"),
        ("Metrics", "PPOConfig.callbacks takes 'module:Attr' names (e.g. my_metrics:Metrics), got 'Metrics'."),
    ],
)
def test_cli_refuses_a_callback_it_cannot_use_in_one_line(tmp_path, capsys, name, said):
    status = cli.main(["train", "--set", f"callbacks={name}", *TINY, "--logdir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("jaxflow: error:")]
    assert line.startswith(f"jaxflow: error: {said}")
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_restore_makes_the_remembered_callbacks_again(tmp_path):
    class Local:  # known only to this process: a restore in another could not make it
        def on_episode_end(self, episode):
            return {"local": 1.0}

    local = "test_callbacks:test_restore_makes_the_remembered_callbacks_again.<locals>.Local"
    small = dict(num_workers=0, rollout_fragment_length=32, train_batch_size=64, minibatch_size=32, num_epochs=1)
    algo = Algorithm.build("PPO", callbacks=Lengths(), **small)
    try:
        path = algo.save(str(tmp_path / "run"))
    finally:
        algo.stop()
    with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
        assert json.load(f)["config"]["callbacks"] == ["test_callbacks:Lengths"]
    given = Algorithm.restore(path, callbacks=Local())  # in place of the remembered ones
    try:
        assert given.config.callbacks == (local,)
        assert given.train()["custom_metrics"] == {"local_mean": 1.0, "local_min": 1.0, "local_max": 1.0}
        local_path = given.save(str(tmp_path / "local"))
    finally:
        given.stop()
    with pytest.raises(CallbackError, match=r"cannot be made here: .* pass callbacks= to Algorithm\.restore"):
        Algorithm.restore(local_path)
    restored = Algorithm.restore(path)
    try:
        [made] = restored.callbacks.objects  # made again from the name the checkpoint keeps
        assert type(made) is Lengths and restored.config.callbacks == ("test_callbacks:Lengths",)
        assert restored.train()["custom_metrics"]["len_min"] >= 8
    finally:
        restored.stop()


class Buggy:
    def on_episode_end(self, episode):
        raise ValueError(f"my callback bug after {episode.length} steps")


BUG_LINE = Buggy.on_episode_end.__code__.co_firstlineno + 1


def test_a_callbacks_bug_on_a_worker_is_named_by_file_and_line(ray_local):
    algo = Algorithm.build("PPO", callbacks=Buggy, **dict(RAY_RUN, num_workers=1))
    try:
        with pytest.raises(ValueError, match="my callback bug after") as raised:
            algo.train()
    finally:
        algo.stop()
    assert "ParallelRollouts: actor 0 raised ValueError('my callback bug after" in str(raised.value)
    assert str(raised.value).endswith(f" at {__file__}:{BUG_LINE} in on_episode_end")
