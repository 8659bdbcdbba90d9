"""No command deletes or overwrites anything it did not write: every output option of every
subcommand pointed at a training run, the current folder, a home-like folder and an unrelated
file is refused in one line with exit status 2, and every file there stays byte for byte;
``--overwrite`` replaces only an earlier output of jaxflow's."""

from __future__ import annotations

import json
import os

import pytest

import jaxflow.api.ray_program
from jaxflow import Algorithm
from jaxflow.api import cli
from jaxflow.api.loop import train
from jaxflow.api.outputs import DESCRIPTION_FILE, VIDEOS_FILE
from jaxflow.api.storage import Storage
from jaxflow.config import ConfigError

# A run of one short iteration in this process (num_workers=0: no Ray), on an env that renders.
TINY_RUN = {
    "env": "CartPole-v1",
    "num_workers": 0,
    "seed": 0,
    "num_envs_per_worker": 1,
    "rollout_fragment_length": 32,
    "train_batch_size": 32,
    "minibatch_size": 32,
    "num_epochs": 1,
}

# What a user's folders hold, some under the names of a run's files (someone else's config.json,
# W&B runs of another project): none of it is jaxflow's to remove.
HOME_FILES = {
    ".bashrc": "export PATH=$HOME/bin:$PATH\n",
    "config.json": '{"editor": "vim"}',
    "wandb/run-1/files/output.log": "another project's W&B run\n",
    "Documents/thesis.tex": "\\chapter{Results}\n",
}
CWD_FILES = {"train.py": "print('mine')\n", "data/obs.npy": "not really numpy", "progress.jsonl": '{"epoch": 1}\n'}
UNRELATED_PNG = b"\x89PNG\r\n\x1a\n someone's photo"

# Each subcommand with an output option: its words, OUT standing for the path tried.
COMMANDS = {
    "train --logdir": ["train", "--algo", "PPO", "--env", "CartPole-v1", "--logdir", "OUT"],
    "tune --logdir": ["tune", "--algo", "PPO", "--env", "CartPole-v1", "--logdir", "OUT"],
    "evaluate --video": ["evaluate", "--checkpoint", "RUN", "--video", "OUT"],
    "export --out": ["export", "--checkpoint", "RUN", "--out", "OUT"],
    "plot --out": ["plot", "RUN", "--out", "OUT"],
}
TARGETS = ("run", "cwd", "home", "file")
WITH_OVERWRITE = ("train --logdir", "evaluate --video", "export --out", "plot --out")
"""The commands that take --overwrite: which must not make a path of another's replaceable."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real training run's folder: config.json, progress.jsonl, TensorBoard events, a checkpoint."""
    logdir = str(tmp_path_factory.mktemp("trained") / "run")
    algo = Algorithm.build("PPO", **TINY_RUN)
    try:
        train(algo, {"training_iteration": 1}, logdir, verbose=False)
    finally:
        algo.stop()
    return logdir


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the output path was checked")

    monkeypatch.setattr(jaxflow.api.ray_program, "init_ray", refuse)


def write_files(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())


def snapshot(*roots):
    """Every file under ``roots`` with its bytes, and every folder: what must survive a refusal."""
    found = {}
    for root in roots:
        for folder, _, files in os.walk(root):
            found[folder] = None
            for name in files:
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    found[path] = f.read()
    return found


@pytest.fixture
def places(run, tmp_path, monkeypatch):
    """The paths each output option is tried at, the current folder a folder of the user's files."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    write_files(home, HOME_FILES)
    write_files(cwd, CWD_FILES)
    write_files(tmp_path, {"photo.png": UNRELATED_PNG})
    monkeypatch.chdir(cwd)
    return {"run": run, "cwd": ".", "home": str(home), "file": str(tmp_path / "photo.png")}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_output_option_writes_over_a_run_a_folder_or_a_file_of_anothers(
    no_ray, run, places, tmp_path, capsys, command, target
):
    before = snapshot(run, tmp_path)
    argv = [places[target] if a == "OUT" else run if a == "RUN" else a for a in COMMANDS[command]]
    # --overwrite too, except for train at a run: replacing a jaxflow run is what it is for.
    overwrite = command in WITH_OVERWRITE and (command, target) != ("train --logdir", "run")
    tries = [argv] + ([[*argv, "--overwrite"]] if overwrite else [])
    for words in tries:
        assert cli.main(words) == 2, words
        err = capsys.readouterr().err
        assert err.startswith("jaxflow: error: ") and err.count("\n") == 1, err
        assert repr(places[target]) in err and "Traceback" not in err
        assert snapshot(run, tmp_path) == before  # every file and folder, byte for byte


def test_a_plot_names_the_formats_it_writes(no_ray, run, tmp_path, capsys):
    assert cli.main(["plot", run, "--out", str(tmp_path / "curves.xyz")]) == 2
    assert "one of .png, .svg, .pdf; got .xyz" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_an_earlier_export_and_nothing_else(run, tmp_path, capsys):
    out = tmp_path / "policy"
    assert cli.main(["export", "--checkpoint", run, "--out", str(out)]) == 0
    first = snapshot(out)
    assert cli.main(["export", "--checkpoint", run, "--out", str(out)]) == 2
    assert "already holds an export (params.npz, policy.jaxexport, policy.json)" in capsys.readouterr().err
    assert snapshot(out) == first
    inode = out.stat().st_ino
    assert cli.main(["export", "--checkpoint", run, "--out", str(out), "--overwrite"]) == 0
    assert out.stat().st_ino != inode  # a new folder moved into place
    assert json.loads((out / DESCRIPTION_FILE).read_text())["checkpoint"].startswith(run)
    assert os.listdir(tmp_path) == ["policy"]  # no temporary or set-aside folder left
    # An export the user added a file to is no longer only jaxflow's: refused even with --overwrite.
    (out / "README.txt").write_text("notes on this policy")
    kept = snapshot(out)
    assert cli.main(["export", "--checkpoint", run, "--out", str(out), "--overwrite"]) == 2
    assert "exists and is not an export jaxflow wrote" in capsys.readouterr().err
    assert snapshot(out) == kept


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the MP4 writer starts ffmpeg
def test_overwrite_replaces_earlier_videos_and_an_earlier_plot(run, tmp_path, capsys):
    videos, plot = tmp_path / "videos", tmp_path / "curves.svg"
    video_args = ["evaluate", "--checkpoint", run, "--episodes", "1", "--video", str(videos)]
    assert cli.main(video_args) == 0
    assert sorted(os.listdir(videos)) == ["episode_000.mp4", VIDEOS_FILE]
    assert cli.main(["plot", run, "--out", str(plot)]) == 0
    capsys.readouterr()
    for argv, held in ((video_args, "a folder of videos"), (["plot", run, "--out", str(plot)], "a plot")):
        before = snapshot(tmp_path)
        assert cli.main(argv) == 2
        assert f"already holds {held}" in capsys.readouterr().err
        assert snapshot(tmp_path) == before
        assert cli.main([*argv, "--overwrite"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["curves.svg", "videos"]
    description = json.loads((videos / VIDEOS_FILE).read_text())
    assert [e["file"] for e in description["episodes"]] == ["episode_000.mp4"]


def test_a_pull_and_a_storage_overwrite_remove_no_files_of_anothers(tmp_path):
    """``--resume URI --logdir DIR`` pulls into DIR, and ``--storage URI --overwrite`` clears the
    URI: neither where the files named like a run's are someone else's."""
    write_files(tmp_path / "home", HOME_FILES)
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="logdir '.*home' exists and is not a run jaxflow wrote"):
        Storage("memory://outputs-pull").pull(str(tmp_path / "home"))
    assert snapshot(tmp_path) == before
    store = Storage("memory://outputs-claim")
    store.fs.pipe_file(store._path("config.json"), b'{"editor": "vim"}')
    with pytest.raises(ConfigError, match="holds files named like a run's .config.json. but no jaxflow run"):
        store.claim(overwrite=True)
    assert store.fs.cat_file(store._path("config.json")) == b'{"editor": "vim"}'
