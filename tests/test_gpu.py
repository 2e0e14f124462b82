"""GPU runs; collected everywhere, skipped where CUDA is unavailable (see conftest.py)."""

import pytest
import torch
from helpers import TINY_RUN, train_run

pytestmark = pytest.mark.gpu


def test_train_on_one_gpu(fake_mnist, tmp_path):
    flags = ["--accelerator", "gpu", "--devices", "1", "--data_dir", str(fake_mnist), "--output_dir", str(tmp_path)]
    metrics = train_run(*flags, *TINY_RUN)
    assert metrics["accelerator"] == "cuda" and metrics["devices"] == 1
    assert metrics["test/acc"] > 0.9


def test_dataset_lives_on_the_gpu(fake_mnist):
    from lightning.pytorch import Trainer

    from mnist_lightning.datamodule import MNISTDataModule

    datamodule = MNISTDataModule(str(fake_mnist), val_size=200)
    datamodule.trainer = Trainer(accelerator="gpu", devices=1, logger=False)
    datamodule.trainer.strategy.setup_environment()
    datamodule.setup("fit")
    assert all(tensor.is_cuda for pair in datamodule.splits.values() for tensor in pair)
    assert torch.cuda.memory_allocated() > 0
