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
    raw = Path(data_dir) / dataset.__name__ / "raw"
    for filename, md5 in dataset.resources if download else []:  # torchvision would download over a damaged one
        if (raw / filename).is_file() and not check_integrity(str(raw / filename), md5):
            raise DataFilesError(
                f"{(raw / filename).resolve()} is damaged: its MD5 sum is not the original's. Delete it and run "
                "again to download it, or copy an intact original in its place."
            )
    new_folders = [path for path in (raw, raw.parent, Path(data_dir)) if not path.exists()]
    sets = []
    for train in (True, False):
        try:
            parsed = dataset(data_dir, train=train, download=download)
        except Exception as error:
            for path in new_folders:  # deepest first: a failed download leaves no empty folders behind
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            fix = extracted_copies_fix(raw, dataset) or (
                f"Offline, put the four original files ({', '.join(name for name, _ in dataset.resources)}) in "
                f"that folder, or pass --data.data_dir a folder holding {dataset.__name__}/raw/ with them"
            )
            raise DataFilesError(
                f"{dataset.__name__} could not be read or downloaded into {raw.resolve()}: "
                f"{' '.join(str(error).split()) or type(error).__name__}. {fix}."
            ) from error
        images, labels = parsed.data, parsed.targets
        if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max() >= len(parsed.classes):
            raise DataFilesError(
                f"The files in {raw.resolve()} are not {dataset.__name__}'s: they hold {len(images)} images of "
                f"{list(images.shape[1:])} pixels and {len(labels)} labels up to {int(labels.max())}. "
                f"{extracted_copies_fix(raw, dataset) or 'Replace them with the originals'}."
            )
        sets.append((images, labels))
    if not val_size < len(sets[0][1]):
        raise MisconfigurationException(
            f"--data.val_size must be between 1 and {len(sets[0][1]) - 1} for this dataset (it has "
            f"{len(sets[0][1])} training images), got {val_size}."
        )
    return sets


def extracted_copies_fix(raw: Path, dataset: type) -> str | None:
    """Beside the archives (whose MD5 sums were checked first), what is wrong is the extracted copies."""
    if all((raw / name).is_file() for name, _ in dataset.resources):
        return "The archives are intact: delete the extracted files (those without .gz) there, to extract them again"
    return None
