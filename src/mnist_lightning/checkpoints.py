"""Load this project's checkpoints, refusing files that are missing, damaged or from another model."""

from dataclasses import dataclass
from pathlib import Path

import torch

from .datamodule import MNISTDataModule
from .errors import UserError
from .lightning_module import MNISTClassifier


@dataclass
class Checkpoint:
    model: MNISTClassifier
    datamodule: MNISTDataModule
    epochs: int  # epochs completed when it was saved


def load_checkpoint(ckpt_path: str | Path, **data_overrides) -> Checkpoint:
    """The model, the data settings it was trained with (``data_overrides`` replace some) and its epoch count.

    Read with ``weights_only=True``: only tensors and plain containers are unpickled, so a checkpoint from an
    untrusted source cannot run code while loading.
    """
    path = Path(ckpt_path)
    if not path.is_file():
        raise UserError(f"--ckpt_path {path}: no such file. Pass a .ckpt file from a run's checkpoints/ folder.")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        model = MNISTClassifier(**checkpoint["hyper_parameters"])
        model.load_state_dict(checkpoint["state_dict"])
        datamodule = MNISTDataModule(**(checkpoint["datamodule_hyper_parameters"] | data_overrides))
    except Exception as error:  # torch raises many types for a bad file; all mean the same here
        details = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(
            f"--ckpt_path {path} is not a readable checkpoint of this project's MNISTClassifier ({details}). "
            "Pass a .ckpt written by scripts/train.py."
        ) from error
    return Checkpoint(model, datamodule, epochs=checkpoint.get("epoch", -1) + 1)
