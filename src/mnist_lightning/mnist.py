"""MNIST as tensors: torchvision downloads, checks and parses; this module splits and normalizes.

Nothing here imports Lightning, so the plain-PyTorch reference shares the very same data code.
"""

from pathlib import Path

import torch
from torch import Tensor
from torchvision.datasets import MNIST
from torchvision.datasets.utils import check_integrity

from .errors import UserError

MEAN, STD = 0.1307, 0.3081  # MNIST training-set pixel statistics, the usual Normalize((0.1307,), (0.3081,))
TRAIN_SIZE, TEST_SIZE = 60_000, 10_000
RAW_FILES = [filename for filename, _md5 in MNIST.resources]


def raw_folder(data_dir: str | Path) -> Path:
    """Where torchvision keeps (and looks for) the four MNIST files."""
    return Path(data_dir) / "MNIST" / "raw"


def download_mnist(data_dir: str | Path) -> None:
    """Fetch MNIST into ``<data_dir>/MNIST/raw`` unless it is there; files already present are MD5-checked."""
    for filename, md5 in MNIST.resources:
        archive = raw_folder(data_dir) / filename
        # torchvision would quietly try to download over a damaged file; say which file is wrong instead.
        if archive.is_file() and not check_integrity(str(archive), md5):
            raise UserError(
                f"{archive.resolve()} is damaged: its MD5 checksum is not MNIST's ({md5}). Delete it and run "
                "again to download it, or copy an intact original in its place.",
                exit_code=1,
            )
    try:
        for train in (True, False):
            MNIST(data_dir, train=train, download=True)
    except (RuntimeError, OSError) as error:
        raise UserError(
            f"MNIST could not be found or downloaded into {raw_folder(data_dir).resolve()}. "
            f"Without a network, put the four original files ({', '.join(RAW_FILES)}) in that folder, "
            "or pass --data_dir pointing at a folder that holds MNIST/raw/ with them. "
            f"What went wrong: {str(error).strip().splitlines()[0]}",
            exit_code=1,
        ) from error


def load_mnist(data_dir: str | Path, train: bool) -> tuple[Tensor, Tensor]:
    """The uint8 images [N, 28, 28] and int64 labels [N] that torchvision parsed from the IDX files."""
    dataset = MNIST(data_dir, train=train)
    return dataset.data, dataset.targets


def split_indices(num_samples: int, val_size: int, seed: int) -> tuple[Tensor, Tensor]:
    """A seeded random train/validation split; its own seed keeps the validation set fixed across runs."""
    if not 0 < val_size < num_samples:
        raise ValueError(f"val_size must be between 1 and {num_samples - 1}, got {val_size}")
    permutation = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    return permutation[val_size:], permutation[:val_size]


def normalize(images: Tensor, mean: float = MEAN, std: float = STD) -> Tensor:
    """uint8 images [N, 28, 28] or [N, 1, 28, 28] -> float [N, 1, 28, 28], standardized in one batched op."""
    # In place on the one new float tensor: out-of-place ops allocate a fresh buffer each, which costs
    # 30x more than the arithmetic for a batch of thousands of images.
    return images.reshape(-1, 1, *images.shape[-2:]).float().mul_(1 / (255 * std)).sub_(mean / std)
