"""Reading the MNIST example's files with torchvision, which downloads them and checks the archives' MD5 sums; what
it does not check (images and labels that do not match) is checked here. A mistake is one paragraph: Lightning's
MisconfigurationException, which the entry points print as the errors of settings."""

import functools
import os
import shutil
import tempfile
from pathlib import Path

from lightning.fabric.utilities.exceptions import MisconfigurationException


class DataFilesError(MisconfigurationException):
    """Missing or damaged data files: one paragraph, as Lightning's errors of settings are, but exit status 1."""

    exit_code = 1


def read_mnist(datamodule):
    """The training and the test set of an MNISTDataModule: uint8 images [N, 28, 28] and labels, parsed by
    torchvision, which downloads them unless they are there. Damaged or missing files, or a ``val_size`` the data
    cannot hold, are a MisconfigurationException saying what to do."""
    dataset, data_dir = datamodule.torchvision_class, datamodule.hparams.data_dir
    raw = Path(data_dir, dataset.__name__, "raw")
    made = [path for path in (raw, *raw.parents) if not path.exists()]  # a failed download leaves none of them
    try:  # read once while the files stay as they are: prepare_data checks what setup then takes
        sets = parse(dataset, data_dir, tuple(path.stat().st_mtime_ns for path in raw.glob("*")))
    except Exception as error:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise DataFilesError(
            f"The files in {raw.absolute()} are missing, damaged or not {dataset.__name__}'s:"
            f" {str(error).strip() or repr(error)}. Put the original {', '.join(n for n, _ in dataset.resources)}"
            " there, and delete those without .gz."
        ) from error
    if datamodule.hparams.val_size >= len(sets[0][1]):
        raise MisconfigurationException(
            f"--data.val_size must be between 1 and {len(sets[0][1]) - 1}, got {datamodule.hparams.val_size}."
        )
    return sets


@functools.lru_cache(maxsize=1)
def parse(dataset, data_dir, files):
    """The two sets as torchvision parses them, checked; ``files``: the files' times, so that changed files are read."""
    raw = Path(data_dir, dataset.__name__, "raw")
    with tempfile.TemporaryDirectory() as copy:
        if raw.is_dir() and not os.access(raw, os.W_OK):  # (a shared dataset folder) torchvision extracts the archives
            data_dir = shutil.copytree(raw, Path(copy, dataset.__name__, "raw")).parents[1]  # in a copy: read-only here
        splits = [dataset(data_dir, train, download=True) for train in (True, False)]
    sets = [(split.data, split.targets) for split in splits]
    for images, labels in sets:  # what torchvision does not check: as many labels as images, of its classes
        if len(images) != len(labels) or labels.max() >= len(dataset.classes):
            raise ValueError(f"{list(images.shape)} images, {len(labels)} labels up to {int(labels.max())}")
    return sets
