"""MNIST-format datasets as tensors: torchvision downloads, checks and parses; this module splits, normalizes
and slices batches.

Nothing here imports Lightning, so every rung of the ladder (plain PyTorch, Fabric, the Trainer) uses the
very same data code.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler
from torchvision.datasets import KMNIST, MNIST, FashionMNIST
from torchvision.datasets.utils import check_integrity

DatasetName = Literal["mnist", "fashion_mnist", "kmnist"]


@dataclass(frozen=True)
class DatasetInfo:
    torchvision_class: type[MNIST]
    mean: float  # training-set pixel statistics, for Normalize((mean,), (std,))
    std: float


DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(MNIST, 0.1307, 0.3081),
    "fashion_mnist": DatasetInfo(FashionMNIST, 0.2860, 0.3530),
    "kmnist": DatasetInfo(KMNIST, 0.1918, 0.3483),
}


class DataError(Exception):
    """The dataset's files are missing or damaged, or cannot serve the settings; the message says what to do."""

    exit_code = 1


def raw_folder(data_dir: str | Path, dataset: DatasetName = "mnist") -> Path:
    """Where torchvision keeps (and looks for) the four original files, e.g. ``data/MNIST/raw``."""
    return Path(data_dir) / DATASETS[dataset].torchvision_class.__name__ / "raw"


def download(data_dir: str | Path, dataset: DatasetName = "mnist") -> None:
    """Fetch the dataset into :func:`raw_folder` unless it is there; files already present are MD5-checked."""
    cls = DATASETS[dataset].torchvision_class
    folder = raw_folder(data_dir, dataset)
    for filename, md5 in cls.resources:
        archive = folder / filename
        # torchvision would quietly try to download over a damaged file; say which file is wrong instead.
        if archive.is_file() and not check_integrity(str(archive), md5):
            raise DataError(
                f"{archive.resolve()} is damaged: its MD5 checksum is not the original's ({md5}). Delete it and "
                "run again to download it, or copy an intact original in its place."
            )
    try:
        for train in (True, False):
            cls(str(data_dir), train=train, download=True)
    except (RuntimeError, OSError) as error:
        names = ", ".join(filename for filename, _md5 in cls.resources)
        raise DataError(
            f"{cls.__name__} could not be found or downloaded into {folder.resolve()}. Without a network, put the "
            f"four original files ({names}) in that folder, or pass --data_dir pointing at a folder that holds "
            f"{cls.__name__}/raw/ with them. What went wrong: {str(error).strip().splitlines()[0]}"
        ) from error


def load(data_dir: str | Path, dataset: DatasetName = "mnist", train: bool = True) -> tuple[Tensor, Tensor]:
    """The uint8 images [N, 28, 28] and int64 labels [N] that torchvision parsed from the IDX files."""
    parsed = DATASETS[dataset].torchvision_class(str(data_dir), train=train)
    return parsed.data, parsed.targets


def split_indices(num_samples: int, val_size: int, seed: int) -> tuple[Tensor, Tensor]:
    """A seeded random train/validation split; its own seed keeps the validation set fixed across runs."""
    if not 0 < val_size < num_samples:
        raise ValueError(f"val_size must be between 1 and {num_samples - 1} for this dataset, got {val_size}")
    permutation = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    return permutation[val_size:], permutation[:val_size]


def normalize(images: Tensor, mean: float, std: float) -> Tensor:
    """uint8 images [N, 28, 28] -> float [N, 1, 28, 28], standardized: what ``ToTensor`` and ``Normalize`` give
    per image, as one batched operation on whatever device the images are on."""
    # In place on the one new float tensor: each out-of-place op would allocate another batch-sized buffer.
    return images.reshape(-1, 1, *images.shape[-2:]).float().mul_(1 / (255 * std)).sub_(mean / std)


class TensorBatches:
    """Model-ready ``(images, labels)`` batches sliced from whole-split uint8 tensors; a DataLoader without
    per-sample ``__getitem__`` and collation.

    The order comes from a ``DistributedSampler`` so that shuffling, its seed, ``set_epoch`` (which Lightning
    and Fabric call on ``loader.sampler`` every epoch) and the per-rank shard under DDP all behave exactly as
    with a ``DataLoader``. Batches are made on the tensors' device: when the dataset lives on the GPU, a
    training step copies nothing from the host.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int,
        mean: float,
        std: float,
        shuffle: bool = False,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        self.images, self.labels, self.batch_size, self.mean, self.std = images, labels, batch_size, mean, std
        self.sampler = DistributedSampler(labels, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.batch_sampler = None  # what a DataLoader has when it batches itself; Lightning reads both

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        order = epoch_order(self.sampler).to(self.images.device)
        for batch in order.split(self.batch_size):
            # index_select copies whole rows; advanced indexing (images[batch]) moves one byte at a time.
            images = self.images.index_select(0, batch)
            yield normalize(images, self.mean, self.std), self.labels.index_select(0, batch)


def epoch_order(sampler: DistributedSampler) -> Tensor:
    """``torch.tensor(list(sampler))``, built with tensor ops instead of a list of Python ints.

    Follows DistributedSampler.__iter__ step by step (a test holds the two equal): a permutation seeded
    with ``seed + epoch``, padded by repetition to split evenly (or truncated with ``drop_last``), then
    every ``num_replicas``-th index from ``rank``.
    """
    count = len(sampler.dataset)
    if sampler.shuffle:
        order = torch.randperm(count, generator=torch.Generator().manual_seed(sampler.seed + sampler.epoch))
    else:
        order = torch.arange(count)
    if sampler.drop_last:
        order = order[: sampler.total_size]
    elif sampler.total_size > count:
        order = order.repeat(math.ceil(sampler.total_size / count))[: sampler.total_size]
    return order[sampler.rank : sampler.total_size : sampler.num_replicas]
