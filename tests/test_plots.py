"""The plots of a finished run (the with_plots option; they need the plots extra): learning curves, a panel per kind
of metric the model logs (loss, acc, f1...), drawn after metrics.json is written, and again later by
``python -m mnist_lightning.core.plots``; on the tests' own tasks (conftest.py's ``task``). The confusion matrix of a
model that keeps one (the example's Classifier): test_example_plots.py."""

import errno
import json
from pathlib import Path

import pytest
from helpers import QUICK, one_line

from mnist_lightning.core import plots
from mnist_lightning.core.train import main

matplotlib = pytest.importorskip("matplotlib")
FULL = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def panels(monkeypatch) -> dict[str, dict[str, list[str]]]:
    """Each figure saved, by file name: its panels' titles and, for each, the curves' labels (read as it is saved)."""
    drawn = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(figure, file, *args, **kwargs):
        drawn[Path(file.name).name.split(".")[1]] = {
            ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in figure.axes
        }
        return real_savefig(figure, file, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)  # (a file of replaced(): .<name>.<pid>.partial)
    return drawn


@pytest.mark.parametrize(
    ("model", "data", "kinds"),
    [
        ("tasks.Classify", "own_data.Points", {"loss": ["train/loss", "val/loss"], "acc": ["val/acc"]}),
        ("tasks.Regress", "tasks.Curve", {"loss": ["train/loss", "val/loss"]}),
        ("tasks.Tag", "tasks.Tagged", {"loss": ["train/loss", "val/loss"], "f1": ["val/f1"]}),
    ],
)
def test_a_finished_run_draws_a_panel_per_kind_of_metric_it_logged(task, tmp_path, capsys, panels, model, data, kinds):
    task(model, data)
    run = tmp_path / "run"
    assert main(["--output_dir", str(run), *QUICK]) == 0
    out = capsys.readouterr().out
    assert (run / "curves.png").stat().st_size > 10_000 and f"Plot: {run / 'curves.png'}" in out
    assert {kind: panels["curves"][kind] for kind in kinds} == kinds  # (and a panel of lr-Adam, if logged)
    # No confusion matrix: these tasks keep none (test_confusion_matrix is the example's).
    assert list(panels) == ["curves"] and not (run / "confusion_matrix.png").exists()
    assert "confusion" not in out and "test/confusion_matrix" not in json.loads((run / "metrics.json").read_text())


def test_the_plots_are_drawn_again_from_metrics_json(task, tmp_path, capsys, panels):
    run = tmp_path / "run"
    assert main(["--output_dir", str(run), *QUICK]) == 0
    drawn = dict(panels)
    (run / "curves.png").unlink()
    capsys.readouterr()
    assert plots.main([str(run)]) == 0
    assert capsys.readouterr().out == f"Plot: {run / 'curves.png'}\n" and panels == drawn


def test_ctrl_c_while_the_plots_are_drawn_says_the_run_is_complete(task, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "save_plots", interrupted)
    run = tmp_path / "run"
    assert main(["--output_dir", str(run), *QUICK]) == 130
    message = one_line(capsys.readouterr().err)
    assert "Interrupted: the run is complete" in message and "Traceback" not in message
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None
    monkeypatch.undo()
    assert plots.main([str(run)]) == 0  # the command the message gives
    assert (run / "curves.png").is_file()


def test_a_full_disk_while_the_plots_are_drawn(task, tmp_path, capsys, monkeypatch):
    """metrics.json is written first: the run is complete, and the message says how to draw the plots later."""
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(figure, file, *args, **kwargs):
        file.write(b"half a picture")
        raise FULL

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    run = tmp_path / "run"
    assert main([*QUICK, "--output_dir", str(run)]) == 1
    captured = capsys.readouterr()
    message = one_line(captured.err)
    assert f"{run / 'curves.png'} could not be written: No space left on device" in message, message
    assert "Traceback" not in message
    assert "Tested the best of 2 epochs: " in captured.out  # the results, said before the plots
    assert f"The run is complete, its results are in {run / 'metrics.json'}" in message, message
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None
    assert (run / "checkpoints" / "last.ckpt").is_file() and not [*run.glob("*.png"), *run.glob(".*partial")]
    command = message.split("To draw its plots later: python -m mnist_lightning.core.plots ")[1].split()
    assert plots.main(command) == 1  # the disk still full: a message again
    assert "could not be written: No space left on device" in one_line(capsys.readouterr().err)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", real_savefig)
    assert plots.main(command) == 0
    assert (run / "curves.png").is_file()


def test_plots_main_without_a_finished_run_says_what_to_pass(tmp_path, capsys):
    assert plots.main([str(tmp_path)]) == 2
    assert f"No {tmp_path / 'metrics.json'}: pass the folder of a finished run" in one_line(capsys.readouterr().err)
