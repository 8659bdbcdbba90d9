"""Learning curves: one line per run, the members' mean with their band, an iteration once."""

from __future__ import annotations

import numpy as np
import pytest

from jaxflow.api import cli
from jaxflow.api.plot import curve, plot_runs
from jaxflow.api.writers import JsonLinesWriter
from jaxflow.config.fields import ConfigError


def write_run(path, rows):
    writer = JsonLinesWriter(str(path))
    for row in rows:
        writer.write(row)
    writer.close()
    return str(path)


def row(i, ret, members=None):
    out = {"training_iteration": i, "env_steps_sampled": 100 * i, "time_s": 2.0 * i, "episode_return_mean": ret}
    if members is not None:
        out["members"] = {f"seed={k}": {"episode_return_mean": v} for k, v in enumerate(members)}
    return out


@pytest.fixture
def runs(tmp_path):
    single = write_run(
        tmp_path / "ppo",
        # no episode finished in iteration 1 (NaN, written as null); iteration 3 written twice: a resume
        [row(1, float("nan")), row(2, 10.0), row(3, 99.0), row(3, 20.0), row(4, 30.0)],
    )
    seeds = write_run(
        tmp_path / "ppo-seeds", [row(i, 0.0, members=[10.0 * i, 10.0 * i + 4.0, 10.0 * i - 1.0]) for i in (1, 2, 3)]
    )
    return single, seeds


def test_a_curve_has_one_point_per_iteration_and_skips_undefined_values(runs):
    c = curve(runs[0], "episode_return_mean")
    np.testing.assert_array_equal(c.x, [200, 300, 400])
    np.testing.assert_array_equal(c.y, [10.0, 20.0, 30.0])  # the resumed run's row for iteration 3 wins
    np.testing.assert_array_equal(c.low, c.y)
    c = curve(runs[0], "episode_return_mean", x="time_s")
    np.testing.assert_array_equal(c.x, [4.0, 6.0, 8.0])


def test_members_give_the_mean_and_the_band(runs):
    c = curve(runs[1], "episode_return_mean")
    np.testing.assert_allclose(c.y, [10 + 1, 20 + 1, 30 + 1])  # mean of (10i, 10i + 4, 10i - 1)
    np.testing.assert_array_equal(c.low, [9.0, 19.0, 29.0])
    np.testing.assert_array_equal(c.high, [14.0, 24.0, 34.0])


def test_plot_draws_one_line_per_run_and_writes_the_png(runs, tmp_path):
    out = tmp_path / "plots" / "curves.png"
    fig = plot_runs(runs, out=str(out))
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["ppo", "ppo-seeds"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), [11.0, 21.0, 31.0])
    assert len(ax.collections) == 1  # a band for the run with members only
    assert ax.get_xlabel() == "env_steps_sampled" and ax.get_ylabel() == "episode_return_mean"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            dict(metric="episode_retrun_mean"),
            r"has no metric 'episode_retrun_mean'. Did you mean 'episode_return_mean'\?",
        ),
        (dict(metric="episode_return_mean", x="steps"), r"--x must be one of \['env_steps_sampled'"),
    ],
)
def test_bad_requests_name_what_is_allowed(runs, args, message):
    with pytest.raises(ConfigError, match=message):
        curve(runs[0], **args)


def test_a_directory_without_progress_is_not_a_run(tmp_path):
    with pytest.raises(ConfigError, match="is not a run directory: it has no progress.jsonl"):
        curve(str(tmp_path), "episode_return_mean")
    (tmp_path / "progress.jsonl").write_text('{"training_iteration": 1}\nnot json\n')
    with pytest.raises(ConfigError, match="progress.jsonl, line 2: not a result row"):
        curve(str(tmp_path), "episode_return_mean")


def test_the_cli_plots_runs_and_refuses_a_directory_without_one(runs, tmp_path, capsys):
    out = tmp_path / "curves.svg"
    assert cli.main(["plot", *runs, "--x", "time_s", "--out", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and "2 learning curves" in capsys.readouterr().out
    assert cli.main(["plot", str(tmp_path / "nothing"), "--out", str(out), "--overwrite"]) == 2  # an earlier plot
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a run directory: it has no progress.jsonl" in err
