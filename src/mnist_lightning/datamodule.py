"""MNISTDataModule: torchvision's MNIST, split 55,000/5,000/10,000 and served as batches of uint8 tensors."""

import os
from typing import Literal

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Subset
from torchvision.datasets import MNIST
from torchvision.transforms import PILToTensor

from .batches import TensorBatches
from .errors import UserError
from .mnist import MEAN, STD, download_mnist, load_mnist, normalize, split_indices


class MNISTDataModule(LightningDataModule):
    """MNIST for training (55,000), validation (5,000) and test (10,000).

    Args:
        data_dir: Folder holding (or receiving) ``MNIST/raw/`` with the four original files.
        batch_size: Samples per batch, for every stage.
        val_size: Training images held out for validation.
        split_seed: Seed of the train/validation split, separate from ``--seed`` so the split never moves.
        pipeline: ``tensor`` (default) slices batches from the parsed uint8 tensors, kept on the training
            device; ``per_sample`` goes through torchvision's per-image PIL path and a DataLoader: about 25x
            slower, use it only to add per-image augmentation in ``per_sample_transform``.
        num_workers: DataLoader worker processes; used by the ``per_sample`` pipeline only.
        mean: Pixel mean used for normalization.
        std: Pixel standard deviation used for normalization.
    """

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: int = 4096,
        val_size: int = 5_000,
        split_seed: int = 0,
        pipeline: Literal["tensor", "per_sample"] = "tensor",
        num_workers: int = 0,
        mean: float = MEAN,
        std: float = STD,
    ) -> None:
        super().__init__()
        if batch_size < 1 or val_size < 1 or num_workers < 0 or std <= 0:
            raise ValueError(
                f"--batch_size and --val_size must be >= 1 (got {batch_size}, {val_size}), --num_workers >= 0 "
                f"(got {num_workers}) and --std > 0 (got {std})"
            )
        self.save_hyperparameters()
        self.splits: dict[str, tuple[Tensor, Tensor]] = {}
        self.split_indices: dict[str, Tensor] = {}
        # uint8 images [N, 28, 28] to predict instead of the test set (scripts/predict.py sets them).
        self.predict_images: Tensor | None = None

    def prepare_data(self) -> None:
        if self.predict_images is None:
            download_mnist(self.hparams.data_dir)

    def setup(self, stage: str) -> None:
        if self.splits or self.predict_images is not None:
            return
        images, labels = load_mnist(self.hparams.data_dir, train=True)
        try:
            train_idx, val_idx = split_indices(len(labels), self.hparams.val_size, self.hparams.split_seed)
        except ValueError as error:  # only now is the size of the training set known
            raise UserError(f"--{error}.") from error
        test_images, test_labels = load_mnist(self.hparams.data_dir, train=False)
        # The Trainer has chosen the device; the whole dataset (47 MB as uint8) moves there once, so no
        # training step waits for a host-to-device copy. On the CPU this is a no-op.
        device = self._device()
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
        if self.predict_images is None:
            return self._batches("test", shuffle=False)
        images = self.predict_images.to(self._device())
        no_labels = torch.zeros(len(images), dtype=torch.long, device=images.device)
        return self._tensor_batches(images, no_labels, shuffle=False)

    def transfer_batch_to_device(self, batch, device: torch.device, dataloader_idx: int):
        if self.hparams.pipeline == "tensor" or self.predict_images is not None:
            return batch  # already on `device`: setup() put the whole dataset there
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        # Normalizing after the transfer keeps batches as uint8 until they are on the device: one batched
        # op there instead of one per image on the host.
        images, labels = batch
        return normalize(images, self.hparams.mean, self.hparams.std), labels

    def per_sample_transform(self):
        """The per-image transform of the ``per_sample`` pipeline; add augmentation here."""
        return PILToTensor()

    def _device(self) -> torch.device:
        return self.trainer.strategy.root_device if self.trainer else torch.device("cpu")

    def _tensor_batches(self, images: Tensor, labels: Tensor, shuffle: bool) -> TensorBatches:
        rank, world_size = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        # Shuffle with the run's seed (set by seed_everything), as Lightning's own DistributedSampler does.
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        return TensorBatches(images, labels, self.hparams.batch_size, shuffle, seed, world_size, rank)

    def _batches(self, split: str, shuffle: bool):
        if self.hparams.pipeline == "per_sample":
            dataset = MNIST(self.hparams.data_dir, train=split != "test", transform=self.per_sample_transform())
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
        return self._tensor_batches(*self.splits[split], shuffle=shuffle)
