"""On real MNIST ($MNIST_DATA_DIR): the defaults reach 92 %, and the plain reference lands within 0.5 points."""

import pytest

from mnist_lightning import plain_pytorch
from mnist_lightning.train import parse_config, train

pytestmark = pytest.mark.real_data


def test_defaults_reach_92_percent_and_the_reference_agrees(real_mnist, tmp_path):
    lightning = train(parse_config(["--data_dir", str(real_mnist), "--output_dir", str(tmp_path / "lightning")]))
    plain = plain_pytorch.train_plain(
        plain_pytorch.build_parser().parse_args(["--data_dir", str(real_mnist), "--output_dir", str(tmp_path / "p")])
    )
    assert lightning["test/acc"] >= 0.92
    assert abs(lightning["test/acc"] - plain["test/acc"]) <= 0.005
