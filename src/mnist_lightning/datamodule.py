from functools import partial
from typing import Literal

import torch
from pydantic import NonNegativeInt, PositiveInt
from torchvision.datasets import KMNIST, MNIST, FashionMNIST

from .digit_files import read_digits, readable, with_picture_recipe  # only with_digit_photos
from .in_memory import InMemoryDataModule, Samples, normalize, normalize_spec
from .mnist_files import read_mnist

DATASETS = {  # torchvision's class, and the training images' mean and std
    "mnist": (MNIST, 0.1307, 0.3081),
    "fashion_mnist": (FashionMNIST, 0.2860, 0.3530),
    "kmnist": (KMNIST, 0.1918, 0.3483),
}


class MNISTDataModule(InMemoryDataModule):
    """MNIST (or FashionMNIST, KMNIST) in memory. For your own data, pass --data my.Data: a LightningDataModule
    that takes batch_size and says input_shape and num_classes.

    Args:
        data_dir: Folder holding (or receiving) <Dataset>/raw/ with the four original files.
        dataset: torchvision's dataset in MNIST's format.
        val_size: Training images held out for validation.
        split_seed: Seed of the train/validation split, apart from --seed so the split never moves.
        num_workers: DataLoader worker processes (the data is in memory: 0 is fastest).
    """

    input_shape, num_classes = (1, 28, 28), 10  # what the network is built for

    def __init__(
        self,
        data_dir: str = "data",
        dataset: Literal["mnist", "fashion_mnist", "kmnist"] = "mnist",
        batch_size: PositiveInt = 4096,
        val_size: PositiveInt = 5_000,
        split_seed: int = 0,
        num_workers: NonNegativeInt = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.torchvision_class, self.mean, self.std = DATASETS[dataset]
        self.preprocessing = partial(normalize_spec, self.mean, self.std)  # for export.py: how inputs are made
        # with_digit_photos:
        # For predict.py and export.py: model inputs from a picture of a digit (or IDX file), and how they are made.
        self.read_file = partial(read_digits, mean=self.mean, std=self.std)
        self.can_read = readable
        self.preprocessing = partial(with_picture_recipe, self.preprocessing())
        # end with_digit_photos

    def prepare_data(self):  # on one process: download the files unless they are there, and check them
        read_mnist(self)

    def setup(self, stage=None):
        if not self.datasets:  # once, for every stage
            full, test = (Samples(normalize(x, self.mean, self.std), y) for x, y in read_mnist(self))
            order = torch.randperm(len(full), generator=torch.Generator().manual_seed(self.hparams.split_seed))
            val, train = order.tensor_split([self.hparams.val_size])  # not --seed: a fixed split
            self.datasets = {"train": Samples(*full[train]), "val": Samples(*full[val]), "test": test}
