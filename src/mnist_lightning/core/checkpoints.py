"""Checkpoints: the one loader every entry point uses, atomic writes, and ``last.ckpt``, the resume point."""

import json
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import torch
from jsonargparse import ArgumentError
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import instantiate_module
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .classes import model_class
from .errors import UserError
from .records import replaced

RECORDED = ("state_dict", "hyper_parameters", "datamodule_hyper_parameters", "epoch", "pytorch-lightning_version")


class CheckpointError(UserError):
    """A checkpoint file is missing, damaged or not one of this project's; the message says which."""


class Checkpoint(NamedTuple):
    model: LightningModule
    datamodule: LightningDataModule
    epochs: int  # completed when it was saved


def load_checkpoint(path: str | Path, **data_overrides: Any) -> Checkpoint:
    """Every entry point loads through here, so a bad file gets the same message everywhere."""
    contents = read_checkpoint(path)
    recorded = {k: v for k, v in contents["datamodule_hyper_parameters"].items() if k != "_instantiator"}
    try:
        model = model_class().load_from_checkpoint(path, map_location="cpu", weights_only=True)
        datamodule = instantiate_module(LightningDataModule, recorded)  # as Lightning's loader does
    except (ArgumentError, ImportError) as error:  # a class not importable here, or settings of another program
        raise CheckpointError(
            f"{path} was trained with settings or classes that cannot be built here ({error}). Make the modules of "
            "its --net and --data importable (install their package, or add their folder to PYTHONPATH), or pass a "
            "checkpoint written by this project's scripts/train.py."
        ) from error
    except RuntimeError as error:  # torch: the recorded network cannot take the weights
        raise CheckpointError(
            f"{path} holds weights that its recorded network cannot take as its code is now: the network's code has "
            f"changed since it was trained, or the file was edited. PyTorch: {error}"
        ) from error
    refuse_non_finite(model, path)
    if data_overrides:  # refused, if at all, by jsonargparse or the data module in their own words
        datamodule = instantiate_module(LightningDataModule, recorded | data_overrides)
    # As train.py records it, whether or not the data module saves its own: evaluate and predict read batch_size.
    datamodule.save_hyperparameters(contents["datamodule_hyper_parameters"] | data_overrides)
    return Checkpoint(model, datamodule, epochs=completed_epochs(contents))


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's contents (tensors and plain values only: it cannot run code), or what the file is instead."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"{path} {'is a folder' if path.is_dir() else 'names no such file'}; --ckpt_path takes a checkpoint "
            "file. A run's best weights are in <run>/checkpoints/best-epochNN-accN.NNNN.ckpt, its latest in last.ckpt "
            "beside them (to resume a run: scripts/train.py --output_dir <run> --ckpt_path last)."
        )
    try:
        with zipfile.ZipFile(path) as archive:  # what torch.save writes; torch.load does not check its checksums
            if damaged := archive.testzip():
                raise zipfile.BadZipFile(f"{damaged} in it no longer matches its checksum: a disk or copy error")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on pickle protocols: not the user's concern
            contents = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:  # torch's advice (weights_only=False) would run the file's code
        raise CheckpointError(
            f"{path} is not a checkpoint of this project: it holds objects other than tensors and plain values, "
            "not loaded as that could run code."
        ) from error
    except Exception as error:  # torch raises many types for one meaning
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint, or it is damaged ({path.stat().st_size} bytes; {error}). "
            "Pass another checkpoint, or a copy of this one from a backup."
        ) from error
    missing = [key for key in RECORDED if not isinstance(contents, dict) or key not in contents]
    if missing:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a checkpoint written by scripts/train.py (it has no "
            f"{', '.join(missing)}). Pass a .ckpt from a run's checkpoints/ folder."
        )
    return contents


def load_weights(model: LightningModule, path: str | Path, resuming: bool = False) -> None:
    """Start ``model`` from a checkpoint's weights (fine-tuning), without its optimizer, schedule or progress. A
    resumed run's own weights are tried here too, so a network whose code changed is named before Lightning loads."""
    contents = read_checkpoint(path)
    try:
        model.load_state_dict(contents["state_dict"])
    except RuntimeError as error:  # missing, unexpected or differently shaped weights: another network
        if resuming:
            raise CheckpointError(
                f"{path}, the resume point of this run, holds weights that its network {type(model.net).__name__} "
                f"cannot take as its code is now: the network's code has changed since the run started. Restore that "
                f"code to resume the run, or start a new run. PyTorch: {error}"
            ) from error
        trained = contents["hyper_parameters"]
        net, advice = trained.get("net"), "."
        if isinstance(net, dict) and net.get("class_path"):
            load_checkpoint(path)  # the record must build a network that takes the weights, or "pass the same" loops
            flags = [f"--net {net['class_path']}", *(f"--net.{k} {v}" for k, v in (net.get("init_args") or {}).items())]
            advice = f": it was trained with `{' '.join(flags)}`; pass the same to start from it."
        sizes = [  # the network is built for the data: other data, other weights, whatever --net is
            f"{name} {json.dumps(trained.get(name))} there, {json.dumps(model.hparams.get(name))} here"
            for name in ("input_shape", "num_classes")
            if json.dumps(trained.get(name)) != json.dumps(model.hparams.get(name))
        ]
        if sizes:
            advice = (
                f": it was trained on other data ({'; '.join(sizes)}); pass the --data it was trained with (its run's "
                "config.yaml names it)."
            )
        raise CheckpointError(
            f"{path} holds the weights of another network than this run's {type(model.net).__name__}{advice}"
        ) from error
    refuse_non_finite(model, path)


def refuse_non_finite(model: LightningModule, path: str | Path) -> None:
    """Weights train.py never keeps (callbacks.EpochHistory stops a diverged run first): an edited or foreign file."""
    if not all(weights.isfinite().all() for weights in model.net.state_dict().values() if weights.is_floating_point()):
        raise CheckpointError(
            f"{path} holds weights that are not finite (NaN or infinity): the network they make gives no prediction. "
            "Pass a checkpoint of a run that did not diverge."
        )


def completed_epochs(contents: dict[str, Any]) -> int:
    """``epoch`` is the epoch in progress: complete if its last batch was (not at a validation within the epoch)."""
    progress = contents.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
    return int(contents["epoch"]) + int(progress.get("is_last_batch", True))


class AtomicCheckpointIO(TorchCheckpointIO):
    """Written whole or not at all (:func:`records.replaced`): Lightning's go through /tmp, moved and not synced."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        with replaced(Path(path)) as file:
            torch.save(checkpoint, file)


class RunCheckpoint(ModelCheckpoint):
    """Its paths follow a run folder moved (off a cluster) and resumed there: ModelCheckpoint would keep only the
    best one, pointing at the old place."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def moved(path: str) -> str:
            return path and os.path.join(self.dirpath, os.path.relpath(path, state_dict["dirpath"]))

        paths = {key: moved(state_dict[key]) for key in ("best_model_path", "kth_best_model_path", "last_model_path")}
        paths["best_k_models"] = {moved(path): score for path, score in state_dict["best_k_models"].items()}
        super().load_state_dict(state_dict | paths | {"dirpath": self.dirpath})


def best_checkpoint(dirpath: Path) -> RunCheckpoint:
    """``best-epochNN-accX.ckpt``: the weights with the best validation accuracy so far, which the run tests."""
    filename = "best-epoch{epoch:02d}-acc{val/acc:.4f}"
    return RunCheckpoint(dirpath, filename, auto_insert_metric_name=False, monitor="val/acc", mode="max")


def last_checkpoint(dirpath: Path) -> RunCheckpoint:
    """``last.ckpt``, the resume point, rewritten at every epoch's end (``save_last=True`` would rewrite it only
    when the monitored metric improved). A resumed run trains its stopped epoch again, on the same batches."""
    return RunCheckpoint(dirpath, "last", enable_version_counter=False, save_on_train_epoch_end=True)
