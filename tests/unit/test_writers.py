"""Where a run's progress goes (terminal bar, notebook widget, plain lines), and that
TensorBoard itself (installed with jaxflow) reads the scalars a run writes."""

from __future__ import annotations

import sys
import types

import pytest

from jaxflow.api.writers import ConsoleProgress, TensorBoardWriter, progress_display


def _kernel(monkeypatch, widgets: bool) -> None:
    """This process seen as a Jupyter kernel (an IPython whose shell is ZMQInteractiveShell)."""
    shell = type("ZMQInteractiveShell", (), {})()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    if widgets:
        monkeypatch.setitem(sys.modules, "ipywidgets", types.ModuleType("ipywidgets"))
    else:
        monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets raises ImportError


def test_progress_goes_to_lines_off_a_terminal_and_to_a_widget_in_a_notebook(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert progress_display() == "lines"
    _kernel(monkeypatch, widgets=False)
    assert progress_display() == "lines"  # tqdm's widget would only warn that ipywidgets is missing
    bar = ConsoleProgress({"env_steps_sampled": 100})
    bar.write({"training_iteration": 1, "env_steps_sampled": 10, "time_s": 1.0, "episode_return_mean": 9.5})
    bar.close()
    assert capsys.readouterr().out.startswith("iter    1  steps        10  return     9.5")
    _kernel(monkeypatch, widgets=True)
    assert progress_display() == "notebook"


def test_tensorboard_reads_the_scalars_a_run_writes(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(str(tmp_path))
    for i, ret in enumerate([10.0, 25.5, 40.0], start=1):
        writer.write({"training_iteration": i, "env_steps_sampled": 1000 * i, "episode_return_mean": ret})
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = events.Scalars("episode_return_mean")
    assert [(s.step, s.value) for s in scalars] == [(1000, 10.0), (2000, 25.5), (3000, 40.0)]
    assert "training_iteration" in events.Tags()["scalars"]
    with pytest.raises(KeyError):
        events.Scalars("no_such_key")


def test_tensorboard_writes_each_evaluation_at_the_step_of_the_policy_it_played(tmp_path):
    """Two evaluations reported late, together, each at its own policy's env steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    evaluations = [
        {"episode_return_mean": r, "training_iteration": i, "env_steps_sampled": 1000 * i}
        for i, r in [(2, 50.0), (4, 80.0)]
    ]
    writer = TensorBoardWriter(str(tmp_path))
    writer.write({"training_iteration": 3, "env_steps_sampled": 3000, "episode_return_mean": 9.0})
    writer.write(
        {
            "training_iteration": 5,
            "env_steps_sampled": 5000,
            "episode_return_mean": 12.0,
            "evaluations": evaluations,
            "evaluation": evaluations[-1],
        }
    )
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = events.Scalars("evaluation/episode_return_mean")
    assert [(s.step, s.value) for s in scalars] == [(2000, 50.0), (4000, 80.0)]
    assert [s.step for s in events.Scalars("episode_return_mean")] == [3000, 5000]
