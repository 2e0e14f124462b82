"""Checkpoints: the one loader every entry point uses, atomic writes, and ``last.ckpt``, the resume point."""

import io
import json
import logging
import pickle
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import torch
from jsonargparse import ArgumentError
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import instantiate_module
from lightning.pytorch.plugins.io import TorchCheckpointIO
from pydantic import PositiveInt

from .classes import model_class
from .devices import check_gpu
from .errors import UserError
from .records import replaced

RECORDED = ("state_dict", "hyper_parameters", "datamodule_hyper_parameters", "epoch", "pytorch-lightning_version")


class Checkpoint(NamedTuple):
    model: LightningModule
    datamodule: LightningDataModule
    epochs: int  # completed when it was saved


def load_checkpoint(path: str | Path, **data_overrides: Any) -> Checkpoint:
    """Every entry point loads through here, so a bad file gets the same message everywhere."""
    contents = read_checkpoint(path)
    recorded = recorded_data(contents)
    try:
        model = model_class().load_from_checkpoint(path, map_location="cpu", weights_only=True)
        datamodule = instantiate_module(LightningDataModule, recorded)  # as Lightning's loader does
    except (ArgumentError, ImportError, RuntimeError) as error:  # a class not importable, or its code changed since
        causes = "the code of its model or data is not importable (PYTHONPATH) or changed since, or the file was edited"
        raise UserError(f"{path} cannot be loaded here ({error}): {causes}.") from error
    refuse_non_finite(model, path)
    if data_overrides:  # refused, if at all, by jsonargparse or the data module in their own words
        datamodule = instantiate_module(LightningDataModule, recorded | data_overrides)
    # As train.py records it, whether or not the data module saves its own: evaluate and predict read batch_size.
    datamodule.save_hyperparameters(contents["datamodule_hyper_parameters"] | data_overrides)
    return Checkpoint(model, datamodule, epochs=completed_epochs(contents))


@dataclass
class CheckpointOptions:
    """The checkpoint, where to run it, and what of its run to change

    Args:
        ckpt_path: A .ckpt written by scripts/train.py.
        accelerator: cpu, gpu, cuda, mps or auto.
        data: Data module arguments to change, e.g. --data.data_dir DIR.
        batch_size: Samples per batch (default: the training run's).
    """

    ckpt_path: str
    accelerator: str = "auto"
    data: dict[str, Any] = field(default_factory=dict)
    batch_size: PositiveInt | None = None


def load_with_overrides(config: Any) -> Checkpoint:
    """The checkpoint of ``config`` (CheckpointOptions), its data module built with their changes, for a command that
    runs it on ``config.accelerator`` (checked first) and prints its results, not the device banners."""
    check_gpu(config.accelerator)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    batch_size = {"batch_size": config.batch_size} if config.batch_size else {}
    return load_checkpoint(config.ckpt_path, **config.data | batch_size)  # the data module's signature checks them


def recorded_data(contents: dict[str, Any]) -> dict[str, Any]:
    """The data module's class path and arguments as train.py recorded them (without Lightning's instantiator)."""
    return {k: v for k, v in contents["datamodule_hyper_parameters"].items() if k != "_instantiator"}


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's contents (tensors and plain values only: it cannot run code), or what the file is instead."""
    try:
        with zipfile.ZipFile(path) as archive:  # what torch.save writes; torch.load does not check its checksums
            if damaged := archive.testzip():
                raise zipfile.BadZipFile(f"{damaged} in it no longer matches its checksum: a disk or copy error")
        contents = torch.load(path, map_location="cpu", weights_only=True)
        if missing := [key for key in RECORDED if not isinstance(contents, dict) or key not in contents]:
            raise ValueError(f"it has no {', '.join(missing)}")
        return contents
    except Exception as error:  # torch raises many types for one meaning
        # Not torch's words for objects it refused: its advice (weights_only=False) would run the file's code.
        reason = "it holds more than tensors and plain values" if isinstance(error, pickle.UnpicklingError) else error
        problem = f"{path} is missing, damaged or not a checkpoint of scripts/train.py ({reason})"
        raise UserError(f"{problem}. Restore it from a copy, or pass another .ckpt of a run.") from error


def load_weights(model: LightningModule, path: str | Path) -> dict[str, Any]:
    """Start ``model`` from a checkpoint's weights (fine-tuning), without its optimizer, schedule or progress; the
    checkpoint's contents. A resumed run's own weights are tried here too, so a network whose code changed is named
    before Lightning loads them."""
    contents = read_checkpoint(path)
    try:
        model.load_state_dict(contents["state_dict"])
    except RuntimeError as error:  # missing, unexpected or differently shaped weights
        if "_class_path" in (trained := contents["hyper_parameters"]):  # one of train.py's: its record must build one
            load_checkpoint(path)  # else its network's code changed, or the file was edited
        trained = {key: value for key, value in trained.items() if not key.startswith("_")}
        trained = json.dumps(trained | {"data": recorded_data(contents)}, default=str)
        other = f"{path} holds the weights of another network than this run's {type(model).__name__} has"
        raise UserError(f"{other}. Pass the options and --data it was trained with: {trained}.") from error
    refuse_non_finite(model, path)
    return contents


def refuse_non_finite(model: LightningModule, path: str | Path) -> None:
    """Weights train.py never keeps (callbacks.EpochHistory stops a diverged run first): an edited or foreign file."""
    if not all(weights.isfinite().all() for weights in model.parameters()):
        raise UserError(f"{path} holds weights that are not finite (NaN or infinity): pass another checkpoint.")


def completed_epochs(contents: dict[str, Any]) -> int:
    """``epoch`` is the epoch in progress: complete if its last batch was (not at a validation within the epoch)."""
    progress = contents.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
    return int(contents["epoch"]) + int(progress.get("is_last_batch", True))


class AtomicCheckpointIO(TorchCheckpointIO):
    """Written whole or not at all (:func:`records.replaced`): Lightning's go through /tmp, moved and not synced.
    Serialized in memory first, as Lightning's own _atomic_save: a short write is then the OSError that says why."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        torch.save(checkpoint, buffer := io.BytesIO())
        with replaced(Path(path)) as file:
            file.write(buffer.getbuffer())


class RunCheckpoint(ModelCheckpoint):
    """Its paths follow a run folder moved (off a cluster) and resumed there: ModelCheckpoint would keep only the
    best one, pointing at the old place."""

    @cached_property
    def state_key(self) -> str:  # Lightning makes it anew (a repr of five settings) for every hook at every step
        return super().state_key

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict["dirpath"]  # the run folder's own files: their paths start with it
        moved = {k: v.replace(old, self.dirpath, 1) if isinstance(v, str) else v for k, v in state_dict.items()}
        moved["best_k_models"] = {p.replace(old, self.dirpath, 1): s for p, s in moved["best_k_models"].items()}
        super().load_state_dict(moved)


def run_checkpoints(dirpath: Path, model: LightningModule | None) -> tuple[RunCheckpoint | None, RunCheckpoint]:
    """The best weights so far, by the metric the model monitors (``monitor`` and ``mode``, ModelCheckpoint's), which
    the run tests: ``best-epochNN-<metric>X.ckpt`` (none without validation, or a monitor); and ``last.ckpt``, the
    resume point, rewritten at every epoch's end (``save_last=True`` would rewrite it only when the best improved).
    A resumed run trains its stopped epoch again, on the same batches."""
    last = RunCheckpoint(dirpath, "last", enable_version_counter=False, save_on_train_epoch_end=True)
    if not (monitor := getattr(model, "monitor", None)):
        return None, last
    filename = f"best-epoch{{epoch:02d}}-{monitor.rpartition('/')[2]}{{{monitor}:.4f}}"
    mode = getattr(model, "mode", "min")
    return RunCheckpoint(dirpath, filename, auto_insert_metric_name=False, monitor=monitor, mode=mode), last
