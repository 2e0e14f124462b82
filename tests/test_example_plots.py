"""The example's plots (the with_plots option, with the plots extra): its Classifier keeps the test confusion matrix
(``test_confusion_matrix``), which a finished run draws beside its learning curves and keeps in metrics.json, to
draw again."""

import json

import example
import pytest
from helpers import FAKE_TEST, TINY_RUN

from mnist_lightning.core.train import main

pytestmark = [example.data, example.task]
pytest.importorskip("matplotlib")  # the plots extra
plots = pytest.importorskip("mnist_lightning.core.plots")  # the with_plots option


def test_a_finished_run_draws_its_curves_and_its_confusion_matrix_of_every_test_image(fake_mnist, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["--data.data_dir", str(fake_mnist), "--output_dir", str(run), *TINY_RUN]) == 0
    out = capsys.readouterr().out
    for plot in ("curves.png", "confusion_matrix.png"):
        assert (run / plot).stat().st_size > 10_000
        assert f"Plot: {run / plot}" in out
    metrics = json.loads((run / "metrics.json").read_text())
    matrix = metrics["test/confusion_matrix"]  # [true, predicted] counts: drawn again from it by plots.main
    assert len(matrix) == 10 and sum(map(sum, matrix)) == FAKE_TEST
    assert sum(matrix[i][i] for i in range(10)) / FAKE_TEST == pytest.approx(metrics["test/acc"])
    for plot in ("curves.png", "confusion_matrix.png"):
        (run / plot).unlink()
    assert plots.main([str(run)]) == 0
    assert (run / "curves.png").is_file() and (run / "confusion_matrix.png").is_file()
