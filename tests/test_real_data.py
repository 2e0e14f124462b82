"""On real MNIST ($MNIST_DATA_DIR): the template's defaults reach 92 % test accuracy."""

import pytest

from mnist_lightning.core.cli import build_training, parse_args
from mnist_lightning.core.train import train

pytestmark = pytest.mark.real_data


def test_defaults_reach_92_percent(real_mnist, tmp_path):
    training = build_training(parse_args(["--data.data_dir", str(real_mnist), "--output_dir", str(tmp_path / "run")]))
    metrics = train(training)
    assert metrics["test/acc"] >= 0.92
    assert len(metrics["history"]) == 12
