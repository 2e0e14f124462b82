"""MNIST-format datasets as tensors: torchvision downloads, checks and parses; this module splits, normalizes
and slices batches.

Nothing here imports Lightning, so every rung of the ladder (plain PyTorch, Fabric, the Trainer) uses the
very same data code.
"""

import gzip
import logging
import math
import os
import re
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import DistributedSampler
from torchvision.datasets import KMNIST, MNIST, FashionMNIST
from torchvision.datasets.utils import check_integrity

log = logging.getLogger(__name__)
DATA_DIR_FLAGS = "(--data.data_dir; --data_dir on the plain and Fabric scripts)"  # the rungs' names for it
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


class DataSettingError(DataError):
    """The dataset cannot serve the settings (a validation set as large as the training set): a usage error."""

    exit_code = 2


def raw_folder(data_dir: str | Path, dataset: DatasetName = "mnist") -> Path:
    """Where torchvision keeps (and looks for) the four original files, e.g. ``data/MNIST/raw``."""
    return Path(data_dir) / DATASETS[dataset].torchvision_class.__name__ / "raw"


# MD5 sums of MNIST's extracted files, computed from the MD5-checked originals: torchvision knows only the
# archives' sums, and without them extracted files would be used unchecked. (No such table for FashionMNIST and
# KMNIST here: their extracted files are checked against their archives, or an MD5SUMS file, or refused.)
EXTRACTED_MD5 = {
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    }
}
# Data of your own in MNIST's format (or a test's small look-alike) declares its files' sums here, in md5sum's
# format (`md5sum *-ubyte > MD5SUMS`); they are then checked like the originals.
SUMS_FILE = "MD5SUMS"


def download(data_dir: str | Path, dataset: DatasetName = "mnist") -> None:
    """Fetch the dataset into :func:`raw_folder` unless it is there, and verify every file before it is used.

    An archive (``.gz``) must have the original's MD5 sum (torchvision's table); an extracted file must be
    exactly the decompression of its verified archive, or, with no archive beside it, have a known MD5 sum
    (:data:`EXTRACTED_MD5`, or the folder's ``MD5SUMS``). Then every file must parse as the IDX file it is named
    after. A file that fails any check is named in a DataError, before any training.
    """
    cls = DATASETS[dataset].torchvision_class
    folder = raw_folder(data_dir, dataset)
    declared = read_sums(folder / SUMS_FILE)
    known = EXTRACTED_MD5.get(dataset, {})
    for filename, md5 in cls.resources:
        archive, extracted = folder / filename, folder / filename.removesuffix(".gz")
        # torchvision would quietly try to download over a damaged file; say which file is wrong instead.
        if archive.is_file() and not check_integrity(str(archive), md5):
            raise DataError(
                f"{archive.resolve()} is damaged: its MD5 checksum is not the original's ({md5}). Delete it and "
                "run again to download it, or copy an intact original in its place."
            )
        if not extracted.is_file():
            continue
        if archive.is_file():
            # With the decompression's sum known, hashing the file is the same check as decompressing the
            # verified archive and comparing, at a fraction of the cost (it runs before every training run).
            if known.get(extracted.name) and check_integrity(str(extracted), known[extracted.name]):
                continue
            if not same_as_decompressed(extracted, archive):
                # The archive is the verified original and the extracted file only its copy, half-written by an
                # interrupted extraction or changed since: make the copy again.
                if not os.access(folder, os.W_OK):
                    raise DataError(
                        f"{extracted.resolve()} is not the decompression of {archive.name} beside it (which is "
                        f"intact), and {folder.resolve()} is read-only, so it cannot be extracted again. Delete it, "
                        "or copy the folder to a writable place and pass that as the data folder "
                        + DATA_DIR_FLAGS
                        + "."
                    )
                extract(archive, extracted)
                log.warning(f"{extracted} did not match its verified archive {archive.name}: extracted it again.")
            continue
        expected = declared.get(extracted.name) or known.get(extracted.name)
        if expected is None:
            raise DataError(
                f"{extracted.resolve()} cannot be verified: its original archive {filename} is not beside it and "
                f"its MD5 sum is not known. Put the original {filename} in {folder.resolve()} (the file is then "
                f"checked against it), or delete the extracted files to download the originals; for data of your "
                f"own in MNIST's format, list the files' sums in {folder.resolve() / SUMS_FILE} "
                f"(md5sum *-ubyte > {SUMS_FILE})."
            )
        if not check_integrity(str(extracted), expected):
            source = SUMS_FILE if extracted.name in declared else f"the original {dataset} file's"
            raise DataError(
                f"{extracted.resolve()} is not the file it is named after: its MD5 sum differs from {source} "
                f"({expected}). Delete it and run again to download the original, or copy the original in its place."
            )
    missing = [name for name, _ in cls.resources if not (folder / name.removesuffix(".gz")).is_file()]
    if missing and (folder / missing[0]).is_file() and not os.access(folder, os.W_OK):
        raise DataError(
            f"{folder.resolve()} holds the archives but not the extracted files, and it is read-only, so they cannot "
            f"be extracted there. Copy {folder.parent.parent.resolve()} to a writable place and pass that folder "
            f"as the data folder {DATA_DIR_FLAGS} (the first run extracts the files; later runs can then use a "
            "read-only copy)."
        )
    check_idx_files(folder)  # torchvision parses what is there as soon as it is asked for the dataset
    new_folders = [path for path in (folder, folder.parent, Path(data_dir)) if not path.exists()]
    try:
        for train in (True, False):
            cls(str(data_dir), train=train, download=True)
    except (RuntimeError, OSError) as error:
        for path in new_folders:  # deepest first: leave no empty folders behind
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        names = ", ".join(filename for filename, _md5 in cls.resources)
        raise DataError(
            f"{cls.__name__} could not be found or downloaded into {folder.resolve()}. Without a network, put the "
            f"four original files ({names}) in that folder, or pass as the data folder {DATA_DIR_FLAGS} one that holds "
            f"{cls.__name__}/raw/ with them. What went wrong: {download_problem(error)}."
        ) from error
    check_idx_files(folder)  # the files it has just extracted


def download_problem(error: BaseException) -> str:
    """torchvision's download error in one line: what failed ("Error downloading <file>:") and, of the lines
    that follow (one per mirror tried), the last reason."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    problem = lines[0].rstrip(":")
    return f"{problem}: {lines[-1].strip('<>')}" if len(lines) > 1 else problem


def read_sums(path: Path) -> dict[str, str]:
    """``{file name: md5}`` from an ``md5sum``-format file; empty if there is none."""
    if not path.is_file():
        return {}
    sums = {}
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-fA-F]{32}", parts[0]):
            raise DataError(f"{path.resolve()}, line {number}, is not '<md5 sum>  <file name>' (md5sum's format).")
        sums[Path(parts[1].strip().lstrip("*")).name] = parts[0].lower()
    return sums


def extract(archive: Path, target: Path) -> None:
    """Decompress ``archive`` into ``target`` through a temporary file and a rename: never half a file."""
    partial = target.with_name(f".{target.name}.partial")
    with gzip.open(archive, "rb") as source, open(partial, "wb") as copy:
        shutil.copyfileobj(source, copy)
    os.replace(partial, target)


def same_as_decompressed(extracted: Path, archive: Path, chunk: int = 1 << 20) -> bool:
    """Whether ``extracted`` is byte for byte the decompression of ``archive``, read in chunks."""
    with gzip.open(archive, "rb") as expected, open(extracted, "rb") as actual:
        while True:
            want, got = expected.read(chunk), actual.read(chunk)
            if want != got:
                return False
            if not want:
                return True


def check_idx_files(folder: Path) -> None:
    """The images and labels files of each split that is there parse as MNIST's IDX format and belong together:
    right header, sizes that match it, 28x28 images, as many labels as images, labels 0 to 9."""
    for prefix in ("train", "t10k"):
        images, labels = folder / f"{prefix}-images-idx3-ubyte", folder / f"{prefix}-labels-idx1-ubyte"
        if images.is_file() and labels.is_file():
            check_idx_pair(images, labels)


def check_idx_pair(images: Path, labels: Path) -> None:
    counts = []
    for path, dims in ((images, 3), (labels, 1)):
        with open(path, "rb") as file:
            header = file.read(4 + 4 * dims)
        problem = None
        if len(header) < 4 + 4 * dims or header[:3] != b"\x00\x00\x08" or header[3] != dims:
            problem = f"it does not start with the header of an IDX file of {dims}-dimensional uint8 data"
        else:
            shape = struct.unpack(f">{dims}I", header[4:])
            expected = 4 + 4 * dims + math.prod(shape)
            if dims == 3 and shape[1:] != (28, 28):
                problem = f"its images are {shape[1]}x{shape[2]}, not 28x28"
            elif path.stat().st_size != expected:
                problem = f"its header promises {expected} bytes, but it has {path.stat().st_size}"
            counts.append(shape[0])
        if problem:
            raise DataError(
                f"{path.resolve()} is not a valid {'images' if dims == 3 else 'labels'} file: {problem}. Delete it and "
                "run again to get the original, or copy the original in its place."
            )
    if counts[0] != counts[1]:
        raise DataError(
            f"{images.resolve()} holds {counts[0]} images but {labels.name} holds {counts[1]} labels: they are not "
            "from the same dataset. Replace them with the originals."
        )
    label_values = torch.frombuffer(bytearray(labels.read_bytes()[8:]), dtype=torch.uint8)
    if len(label_values) and int(label_values.max()) > 9:
        raise DataError(f"{labels.resolve()} holds labels above 9: it is not a labels file of a 10-class dataset.")


def load(data_dir: str | Path, dataset: DatasetName = "mnist", train: bool = True) -> tuple[Tensor, Tensor]:
    """The uint8 images [N, 28, 28] and int64 labels [N] that torchvision parsed from the IDX files."""
    parsed = DATASETS[dataset].torchvision_class(str(data_dir), train=train)
    return parsed.data, parsed.targets


def training_set_size(data_dir: str | Path, dataset: DatasetName = "mnist") -> int:
    """The number of training images, read from the labels file's header (the files are verified by then)."""
    with open(raw_folder(data_dir, dataset) / "train-labels-idx1-ubyte", "rb") as file:
        return struct.unpack(">I", file.read(8)[4:])[0]


def check_val_size(num_samples: int, val_size: int) -> None:
    if not 0 < val_size < num_samples:
        raise ValueError(
            f"val_size must be between 1 and {num_samples - 1} for this dataset (it has {num_samples} training "
            f"images), got {val_size}"
        )


def split_indices(num_samples: int, val_size: int, seed: int) -> tuple[Tensor, Tensor]:
    """A seeded random train/validation split; its own seed keeps the validation set fixed across runs."""
    check_val_size(num_samples, val_size)
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
        self.served = 0  # batches yielded so far in the current epoch
        self._resume_at: dict[str, int] | None = None

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    # Lightning saves a loader's state_dict in checkpoints and restores it on resume. A run stopped mid-epoch
    # (Ctrl-C, SIGTERM) then continues with the batches it had not trained on, in the same order, instead of
    # starting the epoch's batches over: the resumed run trains on exactly the batches of an uninterrupted one.
    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "served": self.served}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self._resume_at = dict(state_dict)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        # The body runs at the first batch, after Lightning's set_epoch: the epoch's order is known by then.
        resume, self._resume_at = self._resume_at, None
        skip = resume["served"] if resume and resume["epoch"] == self.sampler.epoch else 0
        order = epoch_order(self.sampler).to(self.images.device)
        self.served = skip
        for batch in order.split(self.batch_size)[skip:]:
            # index_select copies whole rows; advanced indexing (images[batch]) moves one byte at a time.
            images = self.images.index_select(0, batch)
            self.served += 1
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
