"""The plots of a finished run (the with_plots option; they need the plots extra): learning curves and the test
confusion matrix, drawn after metrics.json is written, and again later by ``python -m mnist_lightning.core.plots``."""

import errno
import json

import pytest
from helpers import FAKE_TEST, TINY_RUN, one_line

from mnist_lightning.core import plots
from mnist_lightning.core.cli import build_training, parse_args
from mnist_lightning.core.train import main

matplotlib = pytest.importorskip("matplotlib")
FULL = OSError(errno.ENOSPC, "No space left on device")


def test_a_finished_run_draws_its_curves_and_confusion_matrix(fake_mnist, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["--data.data_dir", str(fake_mnist), "--output_dir", str(run), *TINY_RUN]) == 0
    out = capsys.readouterr().out
    for plot in ("curves.png", "confusion_matrix.png"):
        assert (run / plot).stat().st_size > 10_000
        assert f"Plot: {run / plot}" in out
    matrix = json.loads((run / "metrics.json").read_text())["test/confusion_matrix"]
    assert sum(map(sum, matrix)) == FAKE_TEST  # drawn again from it by plots.main


def test_the_confusion_matrix_counts_every_test_image(fake_mnist, tmp_path):
    training = build_training(
        parse_args(["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path), *TINY_RUN])
    )
    (results,) = training.trainer.test(training.model, datamodule=training.datamodule, verbose=False)
    matrix = training.model.test_confusion_matrix
    assert int(matrix.sum()) == FAKE_TEST
    assert float(matrix.trace() / matrix.sum()) == pytest.approx(results["test/acc"])


def test_ctrl_c_while_the_plots_are_drawn_says_the_run_is_complete(fake_mnist, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "save_plots", interrupted)
    run = tmp_path / "run"
    assert main(["--data.data_dir", str(fake_mnist), "--output_dir", str(run), *TINY_RUN]) == 130
    message = one_line(capsys.readouterr().err)
    assert "Interrupted: the run is complete" in message and "Traceback" not in message
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None
    monkeypatch.undo()
    assert plots.main([str(run)]) == 0  # the command the message gives
    assert (run / "curves.png").is_file() and (run / "confusion_matrix.png").is_file()


def test_a_full_disk_while_the_plots_are_drawn(fake_mnist, tmp_path, capsys, monkeypatch):
    """metrics.json is written first: the run is complete, and the message says how to draw the plots later."""
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(figure, file, *args, **kwargs):
        file.write(b"half a picture")
        raise FULL

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    run = tmp_path / "run"
    assert main(["--data.data_dir", str(fake_mnist), *TINY_RUN, "--output_dir", str(run)]) == 1
    captured = capsys.readouterr()
    message = one_line(captured.err)
    assert f"{run / 'curves.png'} could not be written: No space left on device" in message, message
    assert "Traceback" not in message
    assert "Test accuracy" in captured.out  # the results, said before the plots
    assert f"The run is complete, its results are in {run / 'metrics.json'}" in message, message
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None
    assert (run / "checkpoints" / "last.ckpt").is_file() and not [*run.glob("*.png"), *run.glob(".*partial")]
    command = message.split("To draw its plots later: python -m mnist_lightning.core.plots ")[1].split()
    assert plots.main(command) == 1  # the disk still full: a message again
    assert "could not be written: No space left on device" in one_line(capsys.readouterr().err)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", real_savefig)
    assert plots.main(command) == 0
    assert (run / "curves.png").is_file() and (run / "confusion_matrix.png").is_file()


def test_plots_main_without_a_finished_run_says_what_to_pass(tmp_path, capsys):
    assert plots.main([str(tmp_path)]) == 2
    assert f"No {tmp_path / 'metrics.json'}: pass the folder of a finished run" in one_line(capsys.readouterr().err)
