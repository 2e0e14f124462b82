"""Reading the MNIST example's files with torchvision, which downloads them and checks the archives' MD5 sums; what
it does not check (files of another shape) is checked here. A mistake is one paragraph: Lightning's
MisconfigurationException, which the entry points print as the errors of settings."""

import shutil

from lightning.fabric.utilities.exceptions import MisconfigurationException
from torch import Tensor


class DataFilesError(MisconfigurationException):
    """Missing or damaged data files: one paragraph, as Lightning's errors of settings are, but exit status 1."""

    exit_code = 1


def read_mnist(datamodule, download: bool = False) -> list[tuple[Tensor, Tensor]]:
    """The training and the test set of an MNISTDataModule: uint8 images [N, 28, 28] and labels, parsed by
    torchvision (``download``: unless they are there). Damaged or missing files, or a ``val_size`` the data cannot
    hold, are a MisconfigurationException saying what to do."""
    dataset, raw, val_size = datamodule.torchvision_class, datamodule.raw_folder.absolute(), datamodule.hparams.val_size
    made = [path for path in (raw, *raw.parents) if not path.exists()]  # a failed download leaves none of them
    try:
        parsed = [dataset(datamodule.hparams.data_dir, train, download=download) for train in (True, False)]
        sets = [(split.data, split.targets) for split in parsed]
        for images, labels in sets:  # what torchvision does not check: the counts, the shape, the classes
            if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max() >= datamodule.num_classes:
                raise ValueError(f"{list(images.shape)} images, {len(labels)} labels up to {int(labels.max())}")
    except Exception as error:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise DataFilesError(
            f"The files in {raw} are missing, damaged or not {dataset.__name__}'s: {str(error).strip() or repr(error)}."
            f" Put the original {', '.join(n for n, _ in dataset.resources)} there, and delete those without .gz."
        ) from error
    if val_size >= len(sets[0][1]):
        raise MisconfigurationException(f"--data.val_size must be between 1 and {len(sets[0][1]) - 1}, got {val_size}.")
    return sets
