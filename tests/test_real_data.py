"""On real MNIST ($MNIST_DATA_DIR): the template's defaults reach 92 % test accuracy."""

import example
import pytest

from mnist_lightning.core.train import run

pytestmark = [pytest.mark.real_data, example.data, example.task]


def test_defaults_reach_92_percent(real_mnist, tmp_path, capsys):
    metrics = run(["--data.data_dir", str(real_mnist), "--output_dir", str(tmp_path / "run")])
    assert metrics["test/acc"] >= 0.92
    assert len(metrics["history"]) == metrics["epochs"] == 12
    out = capsys.readouterr().out
    assert "Tested the best of 12 epochs: " in out and f"test/acc {metrics['test/acc']:.4f}" in out
