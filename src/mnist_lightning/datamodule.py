"""MNISTDataModule: torchvision's MNIST (or FashionMNIST, KMNIST), split train/validation/test and served as
model-ready batches: float ``[B, 1, 28, 28]``, normalized, with int64 labels."""

import os
from pathlib import Path
from typing import Literal

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Subset
from torchvision import transforms

from . import preprocessing
from .data import (
    DATASETS,
    DataError,
    DatasetName,
    DataSettingError,
    TensorBatches,
    check_val_size,
    download,
    load,
    split_indices,
    training_set_size,
)
from .digit_files import read_digits, readable


class MNISTDataModule(LightningDataModule):
    """An MNIST-format dataset: 60,000 training images, of which ``val_size`` are held out, and 10,000 test.

    Args:
        data_dir: Folder holding (or receiving) ``<Dataset>/raw/`` with the four original files.
        dataset: ``mnist``, ``fashion_mnist`` or ``kmnist``: torchvision's datasets in MNIST's format.
        batch_size: Samples per batch, for every stage.
        val_size: Training images held out for validation.
        split_seed: Seed of the train/validation split, separate from ``--seed`` so the split never moves.
        pipeline: ``tensor`` slices batches from the parsed uint8 tensors, kept on the training device;
            ``per_sample`` goes through torchvision's per-image transforms and a DataLoader: much slower
            (see benchmarks/), for per-image augmentation added in ``per_sample_transform``.
        num_workers: DataLoader worker processes; used by the ``per_sample`` pipeline only.
    """

    # What the model is built for (every data module of this project says both): one grey 28x28 image, 10 classes.
    input_shape = (1, 28, 28)
    num_classes = 10

    def __init__(
        self,
        data_dir: str = "data",
        dataset: DatasetName = "mnist",
        batch_size: int = 4096,
        val_size: int = 5_000,
        split_seed: int = 0,
        pipeline: Literal["tensor", "per_sample"] = "tensor",
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
        if pipeline not in ("tensor", "per_sample"):
            raise ValueError(f"pipeline must be 'tensor' or 'per_sample', got {pipeline!r}")
        for name, value in (("batch_size", batch_size), ("val_size", val_size)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        max_workers = os.cpu_count() or 1
        if not 0 <= num_workers <= max_workers:
            raise ValueError(
                f"num_workers must be between 0 and {max_workers} (this machine's cores), got {num_workers}"
            )
        self.save_hyperparameters()
        self.mean, self.std = DATASETS[dataset].mean, DATASETS[dataset].std
        self.splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.split_indices: dict[str, torch.Tensor] = {}
        self.verified = False  # whether prepare_data has checked the files

    def prepare_data(self) -> None:
        if not self.verified:  # train.py checks the files before building the Trainer; once is enough
            download(self.hparams.data_dir, self.hparams.dataset)
            try:  # here, not first in setup(): a mistake is reported before the Trainer starts
                check_val_size(training_set_size(self.hparams.data_dir, self.hparams.dataset), self.hparams.val_size)
            except ValueError as error:
                raise DataSettingError(f"{error}.") from error
            self.verified = True

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        images, labels = load(self.hparams.data_dir, self.hparams.dataset, train=True)
        try:
            train_idx, val_idx = split_indices(len(labels), self.hparams.val_size, self.hparams.split_seed)
        except ValueError as error:  # only now is the size of the training set known
            raise DataError(f"{error}.") from error
        test_images, test_labels = load(self.hparams.data_dir, self.hparams.dataset, train=False)
        # The whole dataset (47 MB as uint8) moves once to the device the Trainer chose (none outside a
        # Trainer: the CPU), so no training step waits for a host-to-device copy.
        device = self.trainer.strategy.root_device if self.trainer else torch.device("cpu")
        self.splits = {
            "train": (images[train_idx].to(device), labels[train_idx].to(device)),
            "val": (images[val_idx].to(device), labels[val_idx].to(device)),
            "test": (test_images.to(device), test_labels.to(device)),
        }
        self.split_indices = {"train": train_idx, "val": val_idx}

    def train_dataloader(self):
        return self._batches("train", shuffle=True)

    def val_dataloader(self):
        return self._batches("val", shuffle=False)

    def test_dataloader(self):
        return self._batches("test", shuffle=False)

    def predict_dataloader(self):
        return self._batches("test", shuffle=False)

    def read_file(self, path: Path) -> torch.Tensor:
        """Model inputs from a file given to predict.py: a picture of a digit, or an IDX file of many."""
        return read_digits(path, self.mean, self.std)

    def can_read(self, path: Path) -> bool:
        """Which files of a folder given to predict.py are read: pictures and IDX files."""
        return readable(path)

    def preprocessing(self) -> dict:
        """How to make the model's input from a picture, for export's preprocessing.json."""
        return {
            "normalize": {"mean": self.mean, "std": self.std, "formula": "(uint8 / 255 - mean) / std"},
            "from_mnist_digit": "A digit already in MNIST's form (uint8 [28, 28], light ink on black, as in the IDX "
            "files) needs only the normalize step.",
            "from_picture": {
                "reference": "mnist_lightning.preprocessing.to_model_input (numpy, Pillow and torch; the file depends "
                "on nothing else in this project and can be copied on its own)",
                "no_ink": "A picture with no ink (blank, one colour, only noise) has no digit: report it as blank.",
                "steps": preprocessing.STEPS,
            },
        }

    def per_sample_transform(self) -> transforms.Compose:
        """The per-image transform of the ``per_sample`` pipeline; add augmentation here."""
        return transforms.Compose([transforms.ToTensor(), transforms.Normalize((self.mean,), (self.std,))])

    def _batches(self, split: str, shuffle: bool):
        if self.hparams.pipeline == "per_sample":
            cls = DATASETS[self.hparams.dataset].torchvision_class
            dataset = cls(self.hparams.data_dir, train=split != "test", transform=self.per_sample_transform())
            if split != "test":
                dataset = Subset(dataset, self.split_indices[split])
            # Lightning adds a DistributedSampler to this DataLoader under DDP.
            return DataLoader(
                dataset,
                batch_size=self.hparams.batch_size,
                shuffle=shuffle,
                num_workers=self.hparams.num_workers,
                persistent_workers=self.hparams.num_workers > 0,
            )
        rank, world_size = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        # Shuffled with the run's seed (set by seed_everything), as Lightning's own DistributedSampler is.
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        images, labels = self.splits[split]
        return TensorBatches(
            images, labels, self.hparams.batch_size, self.mean, self.std, shuffle, seed, world_size, rank
        )
