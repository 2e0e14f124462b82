"""Checks made before training, so that a mistake ends in one message saying what to do, not in a traceback."""

import operator
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin

import torch
from lightning.pytorch.core.mixins import HyperparametersMixin
from torch import Tensor, nn
from torchvision.datasets.utils import check_integrity

from .errors import UserError

BOUNDS = {">": ("above", operator.gt), ">=": ("at least", operator.ge), "<=": ("at most", operator.le)}


class ModelSettingError(ValueError):
    """A setting of the Classifier (or the data module) that cannot work."""


class NetworkMismatchError(ModelSettingError):
    """The network cannot take the data's samples, or does not give one score per class for each."""


def check_hyperparameters(module: HyperparametersMixin) -> None:
    """Each hyperparameter against its ``__init__`` annotation: the choices of a ``Literal``, the bounds of an
    ``Annotated[float, "> 0"]``. (Not jsonargparse's PositiveFloat & co.: their values, instances of its classes,
    would be pickled into checkpoints.)"""
    for name, kind in module.__init__.__annotations__.items():
        value = module.hparams.get(name)
        if get_origin(kind) is Literal and value not in get_args(kind):
            raise ModelSettingError(f"{name} must be one of {', '.join(map(repr, get_args(kind)))}, got {value!r}")
        for comparison, bound in (text.split() for text in get_args(kind)[1:] if get_origin(kind) is Annotated):
            words, holds = BOUNDS[comparison]
            if not holds(value, float(bound)):
                raise ModelSettingError(f"{name} must be {words} {bound}, got {value}")


def check_network(net: nn.Module, samples: Tensor, num_classes: int) -> None:
    """Raise a NetworkMismatchError, in the network's terms, unless ``net`` maps ``samples`` to one score per class."""
    if num_classes < 2 or samples.dim() < 2 or 0 in samples.shape:
        raise ModelSettingError(
            f"the data must have 2 classes or more and samples of a positive shape, got {num_classes} classes of "
            f"shape {tuple(samples.shape[1:])}"
        )
    name, training = type(net).__name__, net.training
    net.eval()  # no batch-norm statistics updated, no dropout drawn from the random generator
    try:
        with torch.no_grad():
            scores = net(samples)
    except Exception as error:
        raise NetworkMismatchError(
            f"the network {name} cannot take a batch of samples of shape {list(samples.shape)}: "
            f"{str(error).strip() or type(error).__name__}"
        ) from error
    finally:
        net.train(training)
    expected = [len(samples), num_classes]
    if not isinstance(scores, Tensor) or list(scores.shape) != expected:
        got = list(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise NetworkMismatchError(
            f"the network {name} maps a batch of samples of shape {list(samples.shape)} to {got}; it must give "
            f"{expected}, one score per class for each sample"
        )
    if not any(parameter.requires_grad for parameter in net.parameters()):
        raise NetworkMismatchError(f"the network {name} has no trainable parameters: nothing to train")


def read_mnist(datamodule, download: bool = False) -> list[tuple[Tensor, Tensor]]:
    """The training and the test set of an MNISTDataModule: uint8 images [N, 28, 28] and labels, parsed by
    torchvision (``download``: unless they are there). Damaged or missing files, or a ``val_size`` the data cannot
    hold, are a UserError saying what to do."""
    dataset, data_dir, val_size = datamodule.torchvision_class, datamodule.hparams.data_dir, datamodule.hparams.val_size
    raw = Path(data_dir) / dataset.__name__ / "raw"
    for filename, md5 in dataset.resources if download else []:  # torchvision would download over a damaged one
        if (raw / filename).is_file() and not check_integrity(str(raw / filename), md5):
            raise UserError(
                f"{(raw / filename).resolve()} is damaged: its MD5 sum is not the original's. Delete it and run "
                "again to download it, or copy an intact original in its place.",
                exit_code=1,
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
            raise UserError(
                f"{dataset.__name__} could not be read or downloaded into {raw.resolve()}: "
                f"{' '.join(str(error).split()) or type(error).__name__}. Offline, put the four original files "
                f"({', '.join(name for name, _ in dataset.resources)}) in that folder, or pass --data.data_dir a "
                f"folder holding {dataset.__name__}/raw/ with them.",
                exit_code=1,
            ) from error
        images, labels = parsed.data, parsed.targets
        if images.shape[1:] != (28, 28) or len(images) != len(labels) or labels.max() >= len(parsed.classes):
            raise UserError(
                f"The files in {raw.resolve()} are not {dataset.__name__}'s: they hold {len(images)} images of "
                f"{list(images.shape[1:])} pixels and {len(labels)} labels up to {int(labels.max())}. Replace them "
                "with the originals.",
                exit_code=1,
            )
        sets.append((images, labels))
    if not val_size < len(sets[0][1]):
        raise UserError(
            f"--data.val_size must be between 1 and {len(sets[0][1]) - 1} for this dataset (it has "
            f"{len(sets[0][1])} training images), got {val_size}."
        )
    return sets
