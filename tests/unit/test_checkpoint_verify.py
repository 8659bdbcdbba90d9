"""Tampered checkpoints are refused with one line before Ray starts, or skipped for an older
one that verifies; interrupted replaces leave a loadable checkpoint; resuming from one
checkpoint's folder continues its run. One real DQN checkpoint (built without Ray) is copied
and damaged per case."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable

import jax
import numpy as np
import pytest

import jaxflow.api.ray_program
from jaxflow.api import checkpoint, cli, manifest
from jaxflow.api.registry import get_algorithm
from jaxflow.api.restore import plan_restore, state_template
from jaxflow.api.user_modules import MissingNameError
from jaxflow.config.fields import ConfigError
from jaxflow.config.names import make_config
from jaxflow.config.parsing import to_json_dict
from jaxflow.replay import saved as saved_replay
from jaxflow.replay.shard import ReplayShard

CONFIG = dict(env="CartPole-v1", hidden_sizes=(16,), num_replay_shards=2, buffer_size=2_000, learning_starts=100)
CAPACITY = 1_000  # each shard's: buffer_size / num_replay_shards
GOOD, TAMPERED = "checkpoint_000001", "checkpoint_000002"


class Payload:
    """Unpickled, it creates the file ``marker``: what a crafted checkpoint could run."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _shard_export(size: int, capacity: int = CAPACITY) -> bytes:
    """A replay shard's real export (:meth:`ReplayShard.export_state`) holding ``size`` items."""
    shard = ReplayShard(capacity=capacity, seed=0)
    shard.add({"obs": np.ones((size, 4), np.float32)})
    return shard.export_state()


def _write_replay(path: str) -> dict:
    """Two shards' files, of 3 and 2 items, as ``ReplayShards.save`` writes and records them."""
    exports = [_shard_export(3), _shard_export(2)]
    for i, data in enumerate(exports):
        open(f"{path}/replay_shard_{i}.npz", "wb").write(data)
    return {saved_replay.RECORD_KEY: [saved_replay.summary(data) for data in exports]}


def _save(directory: str, state, iteration: int, config) -> str:
    meta = {"algorithm": "DQN", "config": to_json_dict(config), "context": {"counters": {"env_steps_sampled": 7}}}
    return checkpoint.save(directory, iteration, state, meta, _write_replay)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A good checkpoint, and two whose state does not fit their config: reshaped, retyped."""
    root = tmp_path_factory.mktemp("ckpts")
    spec = get_algorithm("DQN")
    config = make_config(spec.config_cls, **CONFIG)
    state = jax.device_get(state_template(config, spec).state)
    other = jax.device_get(state_template(make_config(spec.config_cls, **dict(CONFIG, hidden_sizes=(8,))), spec).state)
    retyped = state._replace(step=np.asarray(state.step, np.float32))
    return {
        "good": _save(str(root / "good"), state, 2, config),
        "reshaped": _save(str(root / "reshaped"), other, 2, config),
        "retyped": _save(str(root / "retyped"), retyped, 2, config),
    }


def _orbax_file(path: str) -> str:
    files = [f for f in manifest.files_under(path) if f.startswith("state/") and "/d/" in f]
    return os.path.join(path, max(files, key=lambda f: os.path.getsize(os.path.join(path, f))))


def _flip(path: str) -> None:
    target = _orbax_file(path)
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(target, "wb").write(bytes(data))


def _truncate(path: str) -> None:
    target = _orbax_file(path)
    os.truncate(target, os.path.getsize(target) - 5)


def _edit_json(name: str, edit: Callable, reseal: bool = True) -> Callable[[str], None]:
    """Rewrites ``name`` as ``edit(its JSON)`` (a str is written raw) and reseals the manifest,
    so that the content check itself, not the checksum, must refuse it."""

    def tamper(path: str) -> None:
        with open(os.path.join(path, name)) as f:
            value = edit(json.load(f))
        with open(os.path.join(path, name), "w") as f:
            f.write(value if isinstance(value, str) else json.dumps(value, indent=1))
        if reseal and name != manifest.MANIFEST:
            manifest.write_manifest(path)

    return tamper


def _meta(**changes) -> Callable[[str], None]:
    return _edit_json("meta.json", lambda m: {**m, **changes})


def _config(**changes) -> Callable[[str], None]:
    return _edit_json("meta.json", lambda m: {**m, "config": {**m["config"], **changes}})


def _without(key: str) -> Callable[[str], None]:
    return _edit_json("meta.json", lambda m: {k: v for k, v in m.items() if k != key})


def _npz(reseal: bool = True, **arrays) -> Callable[[str], None]:
    def tamper(path: str) -> None:
        np.savez(os.path.join(path, "replay_shard_0.npz"), **arrays)
        if reseal:
            manifest.write_manifest(path)

    return tamper


def _then_reseal(fn: Callable[[str], None]) -> Callable[[str], None]:
    def tamper(path: str) -> None:
        fn(path)
        manifest.write_manifest(path)

    return tamper


def _format_1(path: str) -> None:
    """A format-1 checkpoint (no manifest) with an object array: unverified, still checked."""
    _meta(format_version=1)(path)
    os.remove(os.path.join(path, manifest.MANIFEST))
    np.save(os.path.join(path, "extra.npy"), np.array([{"a": 1}], dtype=object))


def _replace_with_file(path: str) -> None:
    shutil.rmtree(path)
    open(path, "w").write("not a checkpoint")


def _empty(path: str) -> None:
    shutil.rmtree(path)
    os.makedirs(path)


OBJECT = np.array(["x", None], dtype=object)
CASES: dict[str, tuple[str, Callable[[str], None], str]] = {
    # name: (which saved checkpoint, tamper(path), expected message fragment)
    "bit flip in an orbax file": ("good", _flip, "does not match its SHA-256 in the manifest"),
    "truncated orbax file": ("good", _truncate, "bytes, the manifest says"),
    "deleted orbax file": ("good", lambda p: os.remove(_orbax_file(p)), "missing file state/"),
    "deleted replay file": ("good", lambda p: os.remove(f"{p}/replay_shard_0.npz"), "missing file replay_shard_0.npz"),
    "extra file": ("good", lambda p: open(f"{p}/notes.txt", "w").write("hi"), "unexpected file notes.txt"),
    "meta.json edited, manifest not": ("good", _edit_json("meta.json", lambda m: {**m, "iteration": 9}, reseal=False), "meta.json does not match its SHA-256"),
    "manifest deleted": ("good", lambda p: os.remove(f"{p}/manifest.json"), "no manifest.json"),
    "manifest not JSON": ("good", _edit_json("manifest.json", lambda m: "{files"), "manifest.json is not valid JSON"),
    "manifest a list": ("good", _edit_json("manifest.json", lambda m: [m]), "manifest.json is not an object"),
    "manifest size edited": ("good", _edit_json("manifest.json", lambda m: {"files": {k: {**v, "size": v["size"] + 1} for k, v in m["files"].items()}}), "bytes, the manifest says"),
    "manifest entry dropped": ("good", _edit_json("manifest.json", lambda m: {"files": {k: v for k, v in m["files"].items() if k != "meta.json"}}), "unexpected file meta.json"),
    "manifest entry without sha256": ("good", _edit_json("manifest.json", lambda m: {"files": {k: {"size": v["size"]} for k, v in m["files"].items()}}), "manifest.json is not an object"),
    "meta.json not JSON": ("good", _edit_json("meta.json", lambda m: "{'algorithm': 'DQN'"), "meta.json is not valid JSON"),
    "meta.json a list": ("good", _edit_json("meta.json", lambda m: [m]), "meta.json is a JSON array, not an object"),
    "meta.json deleted": ("good", _then_reseal(lambda p: os.remove(f"{p}/meta.json")), "no meta.json"),
    "algorithm: 5": ("good", _meta(algorithm=5), "meta.json: algorithm is integer, not string"),
    "unknown algorithm": ("good", _meta(algorithm="DQX"), "Unknown algorithm 'DQX'"),
    "format version 99": ("good", _meta(format_version=99), "has checkpoint format 99; this jaxflow reads formats 1 and 2"),
    "format version a string": ("good", _meta(format_version="2"), "has checkpoint format '2'"),
    "no format version": ("good", _without("format_version"), "has checkpoint format None"),
    "no context": ("good", _without("context"), "meta.json lacks ['context']"),
    "no algorithm": ("good", _without("algorithm"), "meta.json lacks ['algorithm']"),
    "iteration a string": ("good", _meta(iteration="2"), "iteration is string, not integer"),
    "iteration a boolean": ("good", _meta(iteration=True), "iteration is boolean, not integer"),
    "config a list": ("good", _meta(config=[1]), "config is array, not object"),
    "context a list": ("good", _meta(context=[]), "context is array, not object"),
    "config with an unknown field": ("good", _config(lrr=0.1), "its DQN config does not parse: DQNConfig has no field 'lrr'"),
    "config with an invalid value": ("good", _config(gamma=2.0), "its DQN config does not parse: DQNConfig.gamma must satisfy"),
    "config value of the wrong type": ("good", _config(seed="zero"), "its DQN config does not parse: DQNConfig.seed must be int"),
    "config asking for a window": ("good", _config(env_config={"render_mode": "human"}), "env_config sets 'render_mode', which is the user's to choose, not a file's"),
    "config with an unknown env option": ("good", _config(env_config={"sutton_barto": True}), "CartPole-v1: its config key 'sutton_barto' is not an option of this environment"),
    "imports not module names": ("good", _meta(imports=["os; rm"]), "meta.json's imports is ['os; rm'], not a list of module names"),
    "state reshaped": ("reshaped", lambda p: None, "state does not fit this config: opt_state/"),
    "state retyped": ("retyped", lambda p: None, "state does not fit this config: step: saved float32[], expected int32[]"),
    "object array in an npz": ("good", _npz(obs=OBJECT), "replay_shard_0.npz:obs.npy holds an object array (object)"),
    "structured dtype with an object field": ("good", _npz(obs=np.zeros(2, [("a", "f4"), ("b", "O")])), "holds an object array"),
    "replay file of another size, resealed": ("good", _then_reseal(lambda p: open(f"{p}/replay_shard_1.npz", "wb").write(_shard_export(4))), "replay_shard_1.npz holds 4 items of capacity 1000, replay_shards says 2 of 1000"),
    "replay file of another capacity, resealed": ("good", _then_reseal(lambda p: open(f"{p}/replay_shard_0.npz", "wb").write(_shard_export(3, 999))), "replay_shard_0.npz holds 3 items of capacity 999, replay_shards says 3 of 1000"),
    "replay file truncated": ("good", lambda p: os.truncate(f"{p}/replay_shard_0.npz", 100), "replay_shard_0.npz has 100 bytes, the manifest says"),
    "replay file deleted, resealed": ("good", _then_reseal(lambda p: os.remove(f"{p}/replay_shard_1.npz")), "replay_shards lists 2 shards, the files are for shards [0]"),
    "replay file added, resealed": ("good", _then_reseal(lambda p: open(f"{p}/replay_shard_2.npz", "wb").write(_shard_export(1))), "replay_shards lists 2 shards, the files are for shards [0, 1, 2]"),
    "replay file without its meta, resealed": ("good", _npz(obs=np.ones(3, np.float32)), "replay_shard_0.npz is not a replay shard's contents"),
    "replay sizes edited in meta.json": ("good", _meta(replay_shards=[{"size": 5, "capacity": CAPACITY}, {"size": 2, "capacity": CAPACITY}]), "replay_shard_0.npz holds 3 items of capacity 1000, replay_shards says 5 of 1000"),
    "replay record a list of numbers": ("good", _meta(replay_shards=[3, 2]), 'replay_shards is not a list of {"size": int, "capacity": int}'),
    "replay record naming no policy directory": ("good", _meta(replay_shards={"size": 3}), "replay_shards names 'size', which is no replay_<policy> directory here"),
    "npz not a zip": ("good", _then_reseal(lambda p: open(f"{p}/replay_shard_0.npz", "wb").write(b"PK junk")), "replay_shard_0.npz is not a readable numpy file"),
    "format 1 with an object npy": ("good", _format_1, "extra.npy holds an object array"),
    "state/ deleted": ("good", _then_reseal(lambda p: shutil.rmtree(f"{p}/state")), "no state/ directory"),
    "orbax metadata not JSON": ("good", _then_reseal(lambda p: open(f"{p}/state/_METADATA", "w").write("{")), "orbax cannot read the metadata of state/ (state/_METADATA is missing or damaged)"),
    "empty directory": ("good", _empty, "no meta.json"),
    "a file, not a directory": ("good", _replace_with_file, "not a directory"),
}  # fmt: skip


def _tampered(saved, tmp_path, case: str, with_good: bool) -> tuple[str, str]:
    source, tamper, _ = CASES[case]
    run = tmp_path / "run"
    shutil.copytree(saved[source], run / TAMPERED)
    tamper(str(run / TAMPERED))
    if with_good:
        shutil.copytree(saved["good"], run / GOOD)
    return str(run), str(run / TAMPERED)


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the checkpoint was verified")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)


@pytest.mark.parametrize("case", list(CASES))
def test_a_tampered_checkpoint_is_refused_in_one_line_before_ray(saved, tmp_path, capsys, caplog, no_ray, case):
    run, bad = _tampered(saved, tmp_path, case, with_good=False)
    message = CASES[case][2]
    for path in (run, bad):
        with pytest.raises(checkpoint.CheckpointError) as e:
            plan_restore(path)
        assert message in str(e.value) and bad in str(e.value) and "\n" not in str(e.value)
        assert isinstance(e.value, ConfigError)
    # jaxflow logs nothing that would reach stderr beside the error (orbax's own warnings aside).
    assert [
        r.getMessage() for r in caplog.records if r.name.startswith("jaxflow") and r.levelno >= logging.WARNING
    ] == []
    assert cli.main(["train", "--resume", run, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("jaxflow: error: No checkpoint under")


@pytest.mark.parametrize("case", list(CASES))
def test_a_tampered_checkpoint_is_skipped_for_an_older_one_that_verifies(saved, tmp_path, caplog, case):
    run, bad = _tampered(saved, tmp_path, case, with_good=True)
    with caplog.at_level(logging.WARNING, logger="jaxflow.api.checkpoint"):
        plan = plan_restore(run)
    assert plan.path == os.path.join(run, GOOD) and plan.meta["context"]["counters"]["env_steps_sampled"] == 7
    [(skipped, why)] = plan.skipped
    assert skipped == bad and CASES[case][2] in why
    assert any(CASES[case][2] in r.getMessage() for r in caplog.records)
    # Named directly, the tampered checkpoint is refused, never replaced by the good one.
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint .*" + TAMPERED):
        plan_restore(bad)


def test_the_cli_prints_one_line_per_skipped_checkpoint(saved, tmp_path, capsys, monkeypatch):
    run, _ = _tampered(saved, tmp_path, "bit flip in an orbax file", with_good=True)
    shutil.copytree(saved["reshaped"], os.path.join(run, "checkpoint_000003"))

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", stop)
    with pytest.raises(Stop):
        cli.main(["train", "--resume", run, "--quiet"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split()[2] for line in lines[:2]] == [
        os.path.join(run, "checkpoint_000003"),
        os.path.join(run, TAMPERED),
    ]
    assert "state does not fit this config" in lines[0] and "SHA-256" in lines[1]
    assert lines[2].startswith(f"jaxflow: resuming DQN from {os.path.join(run, GOOD)}")


UNKNOWN_ENV = "me/NeverImported-v0"


@pytest.mark.parametrize(
    "imports, said",
    [
        ([], f"its env {UNKNOWN_ENV!r} is unknown here (Unknown environment {UNKNOWN_ENV!r}"),
        (["module_gone_44"], f"its env {UNKNOWN_ENV!r} is unknown here: its run imported module_gone_44 (--import)"),
    ],
)
def test_an_env_nothing_registered_is_named_not_skipped(saved, tmp_path, capsys, no_ray, imports, said):
    """An intact checkpoint whose env is unknown here (the module registering it not imported) is
    neither skipped for an older one nor said not to verify: one line naming the env, and the
    module the run imported where it cannot be imported here; exit status 2 before Ray starts."""
    run = tmp_path / "run"
    shutil.copytree(saved["good"], run / GOOD)
    shutil.copytree(saved["good"], run / TAMPERED)
    _edit_json("meta.json", lambda m: {**m, "config": {**m["config"], "env": UNKNOWN_ENV}, "imports": imports})(
        str(run / TAMPERED)
    )
    with pytest.raises(MissingNameError) as e:
        plan_restore(str(run))
    assert str(e.value).startswith(f"checkpoint {run / TAMPERED}: ") and said in str(e.value)
    assert cli.main(["evaluate", "--checkpoint", str(run)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"jaxflow: error: {e.value}" and "verif" not in line


def test_evaluate_says_each_skipped_checkpoint_once_and_which_one_it_plays(saved, tmp_path, capsys, caplog):
    run, _ = _tampered(saved, tmp_path, "bit flip in an orbax file", with_good=True)
    shutil.copytree(saved["reshaped"], os.path.join(run, "checkpoint_000003"))  # verifies, does not fit
    with caplog.at_level(logging.WARNING):
        assert cli.main(["evaluate", "--checkpoint", run, "--episodes", "1", "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[3].rstrip(":") for line in lines[:2]] == [
        os.path.join(run, "checkpoint_000003"),
        os.path.join(run, TAMPERED),
    ]
    assert lines[0].startswith("jaxflow: skipped checkpoint") and lines[1].startswith("jaxflow: skipped checkpoint")
    assert lines[2] == f"jaxflow: evaluating {os.path.join(run, GOOD)}"
    assert lines[3].startswith("CartPole-v1: greedy return over 1 episodes") and len(lines) == 4
    assert [r for r in caplog.records if r.name.startswith("jaxflow")] == []  # said once, not logged again


def test_a_pickle_payload_never_runs(saved, tmp_path, no_ray):
    marker = tmp_path / "pwned"
    payload = np.array([Payload(str(marker))], dtype=object)
    run, bad = str(tmp_path / "run"), str(tmp_path / "run" / TAMPERED)
    shutil.copytree(saved["good"], bad)
    _npz(obs=payload)(bad)
    with pytest.raises(checkpoint.CheckpointError, match="holds an object array"):
        plan_restore(run)
    assert cli.main(["train", "--resume", run]) == 2
    assert not marker.exists()
    with np.load(os.path.join(bad, "replay_shard_0.npz"), allow_pickle=True) as f:
        f["obs"]  # the payload is live: unpickling it is what verification avoided
    assert marker.exists()


def test_a_format_1_checkpoint_loads_with_a_warning(saved, tmp_path, caplog):
    path = str(tmp_path / GOOD)
    shutil.copytree(saved["good"], path)
    _meta(format_version=1)(path)
    os.remove(os.path.join(path, manifest.MANIFEST))
    with caplog.at_level(logging.WARNING, logger="jaxflow.api.checkpoint"):
        plan = plan_restore(str(tmp_path))
    assert plan.path == path and "without a manifest: its files are unverified" in caplog.text


def test_overrides_that_reshape_the_state_are_refused_naming_them(saved, tmp_path, capsys, no_ray):
    run = tmp_path / "run"
    shutil.copytree(saved["good"], run / GOOD)
    with pytest.raises(checkpoint.CheckpointError) as e:
        plan_restore(str(run), {"hidden_sizes": (32, 32), "num_workers": 3, "lr": 0.5})
    assert (
        "--set on resume may change only fields that leave the learner state's shapes alone; refused: hidden_sizes ("
        in str(e.value)
    )
    plan = plan_restore(str(run), {"num_workers": 3, "lr": 0.5})
    assert plan.config.rollout.num_workers == 3 and plan.config.optimizer.lr == 0.5
    assert cli.main(["train", "--resume", str(run), "--set", "hidden_sizes=32,32", "--set", "num_workers=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused: hidden_sizes (state does not fit this config: " in err


@pytest.mark.parametrize(
    "overrides, layout",
    [
        ({"buffer_size": 4_000}, "would be 2 of 2000"),
        ({"num_replay_shards": 4, "buffer_size": 4_000}, "would be 4 of 1000"),
    ],
)
def test_overrides_that_change_the_replay_layout_are_refused_before_ray(saved, no_ray, overrides, layout):
    with pytest.raises(checkpoint.CheckpointError) as e:
        plan_restore(saved["good"], overrides)
    assert f"its replay is 2 shards of capacity [1000], this config's {layout}" in str(e.value)
    assert "\n" not in str(e.value)
    assert plan_restore(saved["good"], {"learning_starts": 200}).config.learning_starts == 200  # replay kept: allowed
