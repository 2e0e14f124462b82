"""MNISTDataModule, the example data: torchvision's MNIST (or FashionMNIST, KMNIST) split into training,
validation and test sets, held in memory as model-ready tensors and served by standard DataLoaders.

Replace it with your own LightningDataModule (``--data my_package.MyData``): one that takes ``batch_size`` and
says ``input_shape`` (one sample's shape) and ``num_classes`` is all the rest of the project needs.
"""

import os
from pathlib import Path
from typing import Literal

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler
from torchvision.datasets import KMNIST, MNIST, FashionMNIST
from torchvision.datasets.utils import check_integrity

from .digit_files import preprocessing_spec, read_digits, readable  # only with_digit_photos
from .errors import UserError

# torchvision's class and the training set's pixel mean and std, for Normalize((mean,), (std,)).
DATASETS = {
    "mnist": (MNIST, 0.1307, 0.3081),
    "fashion_mnist": (FashionMNIST, 0.2860, 0.3530),
    "kmnist": (KMNIST, 0.1918, 0.3483),
}


class MNISTDataModule(LightningDataModule):
    """60,000 training images, of which ``val_size`` are held out for validation, and 10,000 test images.

    Args:
        data_dir: Folder holding (or receiving) ``<Dataset>/raw/`` with the four original files.
        dataset: ``mnist``, ``fashion_mnist`` or ``kmnist``: torchvision's datasets in MNIST's format.
        batch_size: Samples per batch, for every stage.
        val_size: Training images held out for validation.
        split_seed: Seed of the train/validation split, separate from ``--seed`` so the split never moves.
        num_workers: DataLoader worker processes (the data is in memory: 0 is fastest for MNIST).
    """

    input_shape = (1, 28, 28)  # one sample: what the network is built for
    num_classes = 10

    def __init__(
        self,
        data_dir: str = "data",
        dataset: Literal["mnist", "fashion_mnist", "kmnist"] = "mnist",
        batch_size: int = 4096,
        val_size: int = 5_000,
        split_seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {dataset!r}")
        for name, value in (("batch_size", batch_size), ("val_size", val_size)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        max_workers = os.cpu_count() or 1
        if not 0 <= num_workers <= max_workers:
            raise ValueError(
                f"num_workers must be between 0 and {max_workers} (this machine's cores), got {num_workers}"
            )
        self.save_hyperparameters()
        self.torchvision_class, self.mean, self.std = DATASETS[dataset]
        self.datasets: dict[str, Samples] = {}
        self.prepared = False

    @property
    def raw_folder(self) -> Path:
        return Path(self.hparams.data_dir) / self.torchvision_class.__name__ / "raw"

    def prepare_data(self) -> None:
        """Download the dataset unless it is there; torchvision checks the archives' MD5 sums and parses the files."""
        if self.prepared:  # Lightning calls this hook before each stage; the files do not change in between
            return
        for filename, md5 in self.torchvision_class.resources:  # torchvision would try to download over it
            archive = self.raw_folder / filename
            if archive.is_file() and not check_integrity(str(archive), md5):
                raise UserError(
                    f"{archive.resolve()} is damaged: its MD5 sum is not the original's. Delete it and run again to "
                    "download it, or copy an intact original in its place.",
                    exit_code=1,
                )
        sizes = [len(self._parse(train, download=True)[1]) for train in (True, False)]
        self._check_val_size(sizes[0])  # here, before training starts, not first in setup()
        self.prepared = True

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        images, labels = self._read(train=True)
        self._check_val_size(len(labels))
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.hparams.split_seed))
        val, train = order[: self.hparams.val_size], order[self.hparams.val_size :]
        self.datasets = {
            "train": Samples(images[train], labels[train]),
            "val": Samples(images[val], labels[val]),
            "test": Samples(*self._read(train=False)),
        }

    def train_dataloader(self) -> DataLoader:
        # Shuffled by epoch and seed, so a resumed run draws the same batches; under DDP Lightning puts its
        # DistributedSampler in its place, seeded the same way.
        return self._loader("train", EpochShuffle(len(self.datasets["train"]), int(os.getenv("PL_GLOBAL_SEED", 0))))

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")

    # with_digit_photos:
    def read_file(self, path: Path) -> Tensor:
        """Model inputs from a file given to predict.py: a picture of a digit, or an IDX file of many."""
        return read_digits(path, self.mean, self.std)

    def can_read(self, path: Path) -> bool:
        """Which files of a folder given to predict.py are read: pictures and IDX files."""
        return readable(path)

    def preprocessing(self) -> dict:
        """How to make the model's input from a picture, for export's preprocessing.json."""
        return preprocessing_spec(self.mean, self.std)

    # end with_digit_photos
    def _loader(self, split: str, sampler: Sampler | None = None) -> DataLoader:
        workers = self.hparams.num_workers
        return DataLoader(
            self.datasets[split],
            self.hparams.batch_size,
            sampler=sampler,
            collate_fn=whole_batch,
            num_workers=workers,
            persistent_workers=workers > 0,
        )

    def _check_val_size(self, training_images: int) -> None:
        if not 0 < self.hparams.val_size < training_images:
            raise UserError(
                f"--data.val_size must be between 1 and {training_images - 1} for this dataset (it has "
                f"{training_images} training images), got {self.hparams.val_size}."
            )

    def _read(self, train: bool) -> tuple[Tensor, Tensor]:
        """Normalized float images [N, 1, 28, 28] and int64 labels [N]."""
        images, labels = self._parse(train)
        return normalize(images, self.mean, self.std), labels

    def _parse(self, train: bool, download: bool = False) -> tuple[Tensor, Tensor]:
        """uint8 images [N, 28, 28] and int64 labels [N], parsed by torchvision."""
        folders = (self.raw_folder, self.raw_folder.parent, Path(self.hparams.data_dir))
        new_folders = [path for path in folders if not path.exists()]
        try:
            parsed = self.torchvision_class(self.hparams.data_dir, train=train, download=download)
        except Exception as error:
            for path in new_folders:  # deepest first: a failed download leaves no empty folders behind
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            names = ", ".join(name for name, _ in self.torchvision_class.resources)
            raise UserError(
                f"{self.torchvision_class.__name__} could not be read or downloaded into {self.raw_folder.resolve()}: "
                f"{' '.join(str(error).split()) or type(error).__name__}. Offline, put the four original files "
                f"({names}) in that folder, or pass --data.data_dir a folder holding "
                f"{self.torchvision_class.__name__}/raw/ with them.",
                exit_code=1,
            ) from error
        images, labels = parsed.data, parsed.targets
        if images.shape[1:] != self.input_shape[1:] or len(images) != len(labels) or labels.max() >= self.num_classes:
            raise UserError(
                f"The files in {self.raw_folder.resolve()} are not {self.torchvision_class.__name__}'s: they hold "
                f"{len(images)} images of {list(images.shape[1:])} pixels and {len(labels)} labels up to "
                f"{int(labels.max())}. Replace them with the originals.",
                exit_code=1,
            )
        return images, labels


def normalize(images: Tensor, mean: float, std: float) -> Tensor:
    """uint8 images [N, 28, 28] -> float [N, 1, 28, 28]: torchvision's ToTensor and Normalize, on all at once."""
    return images.unsqueeze(1).float().div_(255).sub_(mean).div_(std)  # in place: no second 188 MB buffer


class Samples(Dataset):
    """In-memory samples that a DataLoader reads a whole batch at a time (``__getitems__``), not one by one:
    one indexing operation per batch instead of a Python call and a collation per sample."""

    def __init__(self, inputs: Tensor, labels: Tensor) -> None:
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.inputs[index], self.labels[index]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        index = torch.tensor(indices)
        return self.inputs.index_select(0, index), self.labels.index_select(0, index)


def whole_batch(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """The collate_fn for Samples: its batches come already stacked."""
    return batch


class EpochShuffle(Sampler[int]):
    """A new order every epoch, drawn from ``seed + epoch`` (DistributedSampler's order on one process).

    DataLoader's own ``shuffle=True`` draws from the global random state, which a checkpoint does not hold; this
    order depends on the epoch alone, which Lightning hands over through ``set_epoch``, resumed runs included.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist())
