"""Data held in memory as tensors: read a whole batch at a time, shuffled in an order a resumed run repeats."""

import os
import warnings

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset


class InMemoryDataModule(LightningDataModule):
    """Serves ``self.datasets`` ("train", "val", "test"; the test set is also the predict set), which ``setup``
    fills with Samples (or Subsets of them), in batches of ``hparams.batch_size`` read by ``hparams.num_workers``."""

    def __init__(self) -> None:
        super().__init__()
        self.datasets: dict[str, Dataset] = {}

    def train_dataloader(self) -> DataLoader:
        # Shuffled by seed and epoch: a resumed run draws the same batches. (Under DDP, Lightning puts its
        # DistributedSampler, seeded the same way, in its place.)
        return self._loader("train", EpochShuffle(len(self.datasets["train"]), int(os.getenv("PL_GLOBAL_SEED", 0))))

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        # Under DDP, every sample once: Lightning's DistributedSampler would repeat a few to give each process as many
        # (and warns that the test metrics count them twice); Lightning's sampler for predictions repeats none.
        ranks = self.trainer.distributed_sampler_kwargs if self.trainer else None  # None: one process
        sampler = UnrepeatedDistributedSampler(self.datasets["test"], shuffle=False, **ranks) if ranks else None
        return self._loader("test", sampler)

    predict_dataloader = test_dataloader

    def _loader(self, split: str, sampler: Sampler | None = None) -> DataLoader:
        # Worker processes would only copy batches already in memory: Lightning's advice to add some counts cores,
        # not data, and is silenced as its docs say (advanced/warnings), as Lightning asks for this loader.
        warnings.filterwarnings("ignore", ".*Consider increasing the value of the `num_workers` argument*")
        workers = self.hparams.num_workers  # collate_fn: Samples gives whole batches
        options = {"collate_fn": tuple, "num_workers": workers, "persistent_workers": workers > 0}
        return DataLoader(self.datasets[split], self.hparams.batch_size, sampler=sampler, **options)


def normalize(images: Tensor, mean: float, std: float) -> Tensor:
    """uint8 images [N, H, W] -> float [N, 1, H, W]: torchvision's ToTensor and Normalize, on all at once."""
    return images.unsqueeze(1).float().div_(255).sub_(mean).div_(std)  # in place: no second full-size buffer


class Samples(TensorDataset):
    """A TensorDataset that a DataLoader reads a batch at a time (``__getitems__``): one indexing operation, not a
    Python call per sample; its batches come stacked (its DataLoader takes ``collate_fn=tuple``)."""

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, ...]:
        index = np.fromiter(indices, np.int64, len(indices))  # torch.tensor(list) is slower
        # numpy's indexing, not torch's: torch's is a parallel region whose idle OpenMP threads then spin on every core
        return tuple(torch.from_numpy(tensor.numpy()[index]) for tensor in self.tensors)


class EpochShuffle(Sampler[int]):
    """A new order every epoch, drawn from ``seed + epoch``: DistributedSampler's order on one process.

    DataLoader's ``shuffle=True`` draws from the global random state, which checkpoints do not hold; this order
    depends on the epoch alone, which Lightning hands over through ``set_epoch``, resumed runs included.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist())
