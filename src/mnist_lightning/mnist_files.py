"""Reading the MNIST example's files: torchvision parses them; what it does not check (a damaged archive that it would
download over, files of another shape) is checked here. Each mistake is Lightning's MisconfigurationException (the
data's settings cannot work), which the entry points print as one paragraph."""

from pathlib import Path

from lightning.fabric.utilities.exceptions import MisconfigurationException
from torch import Tensor
from torchvision.datasets.utils import check_integrity


class DataFilesError(MisconfigurationException):
    """Missing or damaged data files: one paragraph, as Lightning's errors of settings are, but exit status 1."""

    exit_code = 1


def read_mnist(datamodule, download: bool = False) -> list[tuple[Tensor, Tensor]]:
    """The training and the test set of an MNISTDataModule: uint8 images [N, 28, 28] and labels, parsed by
    torchvision (``download``: unless they are there). Damaged or missing files, or a ``val_size`` the data cannot
    hold, are a MisconfigurationException saying what to do."""
    dataset, data_dir, val_size = datamodule.torchvision_class, datamodule.hparams.data_dir, datamodule.hparams.val_size
    raw = (Path(data_dir) / dataset.__name__ / "raw").absolute()
    archives = [name for name, _ in dataset.resources]
    fix = f"Put the original {', '.join(archives)} in {raw} (or pass --data.data_dir a folder holding them in "
    fix += f"{dataset.__name__}/raw/), and delete the files there without .gz: they are extracted again."
    for filename, md5 in dataset.resources if download else []:  # torchvision would download over a damaged one
        if (raw / filename).is_file() and not check_integrity(str(raw / filename), md5):
            raise DataFilesError(f"{raw / filename} is damaged: its MD5 sum is not the original's. {fix}")
    new_folders = [path for path in (raw, raw.parent, Path(data_dir)) if not path.exists()]
    sets = []
    for train in (True, False):
        try:
            parsed = dataset(data_dir, train=train, download=download)
            images, labels = parsed.data, parsed.targets
            if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max() >= len(parsed.classes):
                raise ValueError(
                    f"they are not {dataset.__name__}'s: {len(images)} images of {list(images.shape[1:])} pixels and "
                    f"{len(labels)} labels up to {int(labels.max())}"
                )
        except Exception as error:
            for path in new_folders:  # deepest first: a failed download leaves no empty folders behind
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            said = f"could not be read or downloaded into {raw}: {' '.join(str(error).split()) or type(error).__name__}"
            raise DataFilesError(f"{dataset.__name__} {said}. {fix}") from error
        sets.append((images, labels))
    if not val_size < len(sets[0][1]):
        raise MisconfigurationException(
            f"--data.val_size must be between 1 and {len(sets[0][1]) - 1} for this dataset (it has "
            f"{len(sets[0][1])} training images), got {val_size}."
        )
    return sets
