"""The project as it is configured, whatever its network, data module and LightningModule: a few batches through
training, testing, evaluate, predict and export, as a new project's first `make test` would want."""

import json

import pytest
from example import is_mnist_data
from helpers import FAKE_VAL, write_fake_mnist

from mnist_lightning.core import evaluate, export, predict
from mnist_lightning.core.train import main as train

FEW = ["--max_epochs", "1", "--limit_train_batches", "2", "--limit_val_batches", "2", "--limit_test_batches", "2"]


@pytest.fixture(scope="module")
def project_flags(tmp_path_factory) -> list[str]:
    """What the project's default configuration needs here: for the MNIST example, small generated files in its
    format instead of a download. (A data module of one's own that needs files: give them here.)"""
    if is_mnist_data():
        data_dir = write_fake_mnist(tmp_path_factory.mktemp("mnist"))
        return ["--data.data_dir", str(data_dir), "--data.val_size", str(FAKE_VAL)]
    return []


def test_the_projects_own_configuration_trains_tests_evaluates_predicts_and_exports(project_flags, tmp_path, capsys):
    run = tmp_path / "run"
    assert train([*project_flags, *FEW, "--batch_size", "16", "--output_dir", str(run)]) == 0, capsys.readouterr().err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and any(name.startswith("test/") for name in metrics)
    last = str(run / "checkpoints" / "last.ckpt")
    evaluated = ["--ckpt_path", last, "--limit_test_batches", "2", "--output_dir", str(tmp_path / "evaluated")]
    assert evaluate.main(evaluated) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "evaluated" / "metrics.json").read_text()).keys() >= metrics.keys() - {"seed"}
    output = tmp_path / "predictions.csv"
    assert predict.main(["--ckpt_path", last, "--limit_predict_batches", "2", "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) > 1  # a header and a row per sample
    assert export.main(["--ckpt_path", last, "--output_dir", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "model.pt2").is_file()
