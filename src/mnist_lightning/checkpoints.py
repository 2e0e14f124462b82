"""Checkpoints: the one loader every entry point uses, atomic writes, and ``last.ckpt``, the resume point."""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .datamodule import MNISTDataModule
from .lightning_module import MNISTClassifier


class CheckpointError(Exception):
    """A checkpoint file is missing, damaged or not one of this project's; the message says which."""


@dataclass
class Checkpoint:
    model: MNISTClassifier
    datamodule: MNISTDataModule
    epochs: int  # epochs completed when it was saved


def load_checkpoint(path: str | Path, **data_overrides: Any) -> Checkpoint:
    """The model, the data settings it was trained with (``data_overrides`` replace some) and its epoch count.

    Read with ``weights_only=True``: only tensors and plain containers are unpickled, so a checkpoint from an
    untrusted source cannot run code while loading.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
        model = MNISTClassifier.load_from_checkpoint(path, map_location="cpu", weights_only=True)
        datamodule = MNISTDataModule.load_from_checkpoint(path, weights_only=True, **data_overrides)
    except Exception as error:  # torch and Lightning raise many types for a bad file; all mean the same here
        details = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(
            f"{path} is not a readable checkpoint of this project's MNISTClassifier ({details})"
        ) from error
    return Checkpoint(model, datamodule, epochs=contents.get("epoch", -1) + 1)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write to a temporary file beside the target, flush it to disk, then rename it over the target.

    Lightning's own save writes the file in place; a crash (kill -9, power loss) in the middle leaves half a
    checkpoint, and the run can no longer resume. A rename within one folder is atomic: the file is either
    the old checkpoint or the new one.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.partial")
        with open(temporary, "wb") as file:
            torch.save(checkpoint, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)


class LastCheckpoint(ModelCheckpoint):
    """``checkpoints/last.ckpt``, the resume point: rewritten at the end of every epoch, and on Ctrl-C or SIGTERM.

    ModelCheckpoint's own ``save_last=True`` rewrites it only in epochs where the monitored metric improved:
    a stale resume point. Lightning runs checkpoint callbacks after the others, so the file also holds the
    state of the other callbacks for the epoch (the metrics history, for one).
    """

    def __init__(self, dirpath: Path, resume_hint: str) -> None:
        super().__init__(dirpath, "last", enable_version_counter=False, save_on_train_epoch_end=True)
        self.resume_hint = resume_hint

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning turns SIGTERM into SIGTERMException at the next batch boundary, so the state is consistent.
        if not isinstance(exception, KeyboardInterrupt | SystemExit) or not trainer.training:
            return
        path = Path(self.dirpath) / "last.ckpt"
        trainer.save_checkpoint(path)
        if trainer.is_global_zero:
            print(f"\nInterrupted; progress saved to {path}. Resume with:\n  {self.resume_hint}", file=sys.stderr)
