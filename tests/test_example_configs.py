"""The example's configs (configs/*.yaml): the classic SGD recipe parses to its options and, on real MNIST, reaches
91 %. Its options (--optimizer, --momentum, --lr_schedule) are the example Classifier's."""

from pathlib import Path

import example
import pytest
from helpers import train_run

from mnist_lightning.core.cli import parse_args

pytestmark = example.task
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.real_data
@example.data
def test_classic_sgd_config_reaches_91_percent(real_mnist, tmp_path):
    config = ["--config", str(ROOT / "configs" / "classic_sgd.yaml"), "--data.data_dir", str(real_mnist)]
    metrics = train_run(*config, "--output_dir", str(tmp_path / "sgd"), "--enable_progress_bar", "false")
    assert (metrics["batch_size"], metrics["epochs"]) == (32, 5)
    assert metrics["test/acc"] >= 0.91


def test_classic_sgd_config_parses_to_its_recipe():
    config = parse_args(["--config", str(ROOT / "configs" / "classic_sgd.yaml")])
    assert (config.optimizer, config.lr, config.momentum, config.batch_size) == ("sgd", 0.01, 0.9, 32)
    assert (config.max_epochs, config.lr_schedule) == (5, "constant")
