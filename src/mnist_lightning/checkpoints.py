"""Checkpoints: the one loader every entry point uses, atomic writes, and ``last.ckpt``, the resume point."""

import os
import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jsonargparse import ArgumentParser
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .errors import UserError, WriteError
from .lightning_module import Classifier


class CheckpointError(Exception):
    """A checkpoint file is missing, damaged or not one of this project's; the message says which."""


@dataclass
class Checkpoint:
    model: Classifier
    datamodule: LightningDataModule
    epochs: int  # epochs completed when it was saved


def load_checkpoint(path: str | Path, **data_overrides: Any) -> Checkpoint:
    """The model, the data module it was trained with (``data_overrides`` replace some of its arguments) and its
    epoch count; the network and the data module are rebuilt from the class paths the run recorded.

    Every entry point (train, evaluate, predict, export) loads through here, so each bad input gets the same
    message wherever it is given. Read with ``weights_only=True``: only tensors and plain containers are
    unpickled, so a checkpoint from an untrusted source cannot run code while loading.
    """
    contents = read_checkpoint(path)
    recorded = dict(contents["datamodule_hyper_parameters"])
    class_path = recorded.pop("_class_path", None)
    recorded.pop("_instantiator", None)
    try:
        model = Classifier.load_from_checkpoint(path, map_location="cpu", weights_only=True)
        datamodule = build_data_module(class_path, recorded)
    except Exception as error:  # a class that cannot be imported or built here, or settings from another version
        if unbuilt := unbuildable_class(error):
            raise CheckpointError(
                f"{path} was trained with {unbuilt[0]}, which cannot be built here: "
                f"{unbuilt[1].strip().rstrip('.')}. Make its module importable (install its package, or add its "
                "folder to PYTHONPATH) and run again."
            ) from error
        raise CheckpointError(
            f"{path} holds a checkpoint that this project cannot rebuild: {first_line(error)}. Pass a checkpoint "
            "written by scripts/train.py of this project."
        ) from error
    if data_overrides:  # settings of this evaluation, checked by the data module in its own terms
        try:
            datamodule = build_data_module(class_path, recorded | data_overrides)
        except Exception as error:
            # Named as the user gave them: --batch_size is a flag of its own on every entry point, the rest --data.*.
            given = " ".join(
                f"--{'' if name == 'batch_size' else 'data.'}{name} {value}" for name, value in data_overrides.items()
            )
            raise UserError(f"{given}: {argument_problem(error)}.") from error
    # As train.py records it, whether or not the data module saves its own: evaluate and predict read batch_size.
    datamodule.save_hyperparameters(contents["datamodule_hyper_parameters"] | data_overrides)
    return Checkpoint(model, datamodule, epochs=completed_epochs(contents))


def unbuildable_class(error: BaseException) -> tuple[str, str] | None:
    """The class path that jsonargparse could not import, and why; None for any other error."""
    if found := re.search(r"Problem with given class_path '([^']+)':\s*(.+)", str(error)):
        return found[1], found[2]
    # The network is a callable to jsonargparse (Classifier's ``net``), which says why before the class path.
    callable_class = r"expects a function or a callable class: (.+?)\. Got value: Namespace\(class_path='([^']+)'"
    if found := re.search(callable_class, str(error), flags=re.DOTALL):
        return found[2], found[1]
    return None


def build_data_module(class_path: str | None, arguments: dict[str, Any]) -> LightningDataModule:
    """The data module a run recorded (its class path and arguments), the arguments checked against its signature."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningDataModule, "data", required=True)
    config = parser.parse_object({"data": {"class_path": class_path, "init_args": arguments}})
    return parser.instantiate_classes(config).data


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The raw contents of a checkpoint written by this project, or a CheckpointError that says what the file is."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(path.glob("checkpoints/*.ckpt")) or sorted(path.glob("*.ckpt"))
        listed = ", ".join(str(file) for file in inside[:4]) + (", ..." if len(inside) > 4 else "")
        held = f" It holds {listed}: best-* are the weights that did best on validation, last.ckpt the latest." * bool(
            inside
        )
        raise CheckpointError(f"{path} is a folder; --ckpt_path takes a .ckpt file.{held}")
    if not path.is_file():
        hint = {
            "last": " To resume a run of scripts/train.py, pass --output_dir <its folder> --ckpt_path last.",
            "best": " Pass the file itself: a run's best weights are in <run>/checkpoints/best-epochNN-accN.NNNN.ckpt.",
        }.get(str(path), "")
        raise CheckpointError(f"{path}: no such file.{hint}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): not a checkpoint, or a copy that never finished.")
    with open(path, "rb") as file:
        start = file.read(2)
    if not zipfile.is_zipfile(path) and start[:1] != b"\x80":  # torch.save writes a zip; old torch, a pickle
        raise CheckpointError(f"{path} is not a PyTorch checkpoint: it is another kind of file, or damaged.")
    if zipfile.is_zipfile(path):  # torch.load does not check the checksums the zip holds of each of its parts
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        if damaged:
            others = sorted(str(other) for other in path.parent.glob("*.ckpt") if other != path)
            instead = f" Its folder also holds {', '.join(others)}." if others else ""
            raise CheckpointError(
                f"{path} is damaged: {damaged} in it no longer matches the checksum written with it (a disk or copy "
                f"error), so it was not used. Pass another checkpoint, or a copy of this one from a backup.{instead}"
            )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on pickle protocols: not the user's concern
            contents = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message suggests weights_only=False, which would run whatever code the file holds: not here.
        raise CheckpointError(
            f"{path} is not a checkpoint of this project: it holds Python objects other than tensors and plain "
            "values, which are not loaded because loading them could run code."
        ) from error
    except Exception as error:  # zip errors, truncation, text files: torch raises many types for one meaning
        raise CheckpointError(
            f"{path} is not a readable PyTorch checkpoint (damaged, truncated, or another kind of file): "
            f"{first_line(error)}"
        ) from error
    missing = [
        key
        for key in (
            "state_dict",
            "hyper_parameters",
            "datamodule_hyper_parameters",
            "epoch",
            "pytorch-lightning_version",
        )
        if not isinstance(contents, dict) or key not in contents
    ]
    if missing:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a checkpoint written by scripts/train.py (it has no "
            f"{', '.join(missing)}). Pass a .ckpt from a run's checkpoints/ folder."
        )
    return contents


def load_weights(model: LightningModule, path: str | Path) -> None:
    """Start ``model`` from the weights of a checkpoint of this project (fine-tuning); its optimizer, schedule and
    progress are not taken."""
    contents = read_checkpoint(path)
    try:
        model.load_state_dict(contents["state_dict"])
    except RuntimeError as error:  # missing, unexpected or differently shaped weights: another network
        net = contents["hyper_parameters"].get("net")
        flags = ""
        if isinstance(net, dict) and net.get("class_path"):
            arguments = (net.get("init_args") or {}).items()
            flags = " ".join([f"--net {net['class_path']}", *(f"--net.{key} {value}" for key, value in arguments)])
        raise CheckpointError(
            f"{path} holds the weights of another network than this run's {type(model.net).__name__}"
            + (f": it was trained with `{flags}`; pass the same to start from it." if flags else ".")
        ) from error


def completed_epochs(contents: dict[str, Any]) -> int:
    """Epochs fully trained when the checkpoint was saved: ``epoch`` is the epoch in progress, complete only if
    its last batch was done (a checkpoint saved on Ctrl-C or SIGTERM can be mid-epoch)."""
    progress = contents.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
    finished = progress.get("is_last_batch", True)
    return int(contents.get("epoch", -1)) + (1 if finished else 0)


def argument_problem(error: BaseException) -> str:
    """What a jsonargparse error says is wrong, with the argument it is about, without the union and value dumps."""
    key = None
    skipped = ("Does not validate", "Subtypes:", "Errors:", "Given value", "Problem with given class_path")
    for line in str(error).splitlines():
        line = line.strip().removeprefix("- ")
        if named := re.fullmatch(r'Parser key "([^"]+)":', line):
            key = named[1]
        elif line and not line.startswith(skipped) and line != "Expected a <class 'NoneType'>":
            return f"{key}: {line.rstrip('.')}" if key and key != "data" else line.rstrip(".")
    return first_line(error)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else type(error).__name__


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
        try:
            with open(temporary, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException as error:  # Ctrl-C, a full disk: the previous checkpoint stays, and no partial file
            temporary.unlink(missing_ok=True)
            if isinstance(error, OSError | RuntimeError):  # torch reports a short write as a RuntimeError
                raise WriteError(path, error) from error
            raise


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint for a run folder that may be moved or copied (to another disk, off a cluster) and resumed
    there: the checkpoint paths it saved in its state are taken to the folder's new place, where the files are.

    ModelCheckpoint keeps its best and last paths only when the folder is where it was; elsewhere it warns and
    keeps the best path alone, which still points at the old place.
    """

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and old != new:

            def moved(path: str) -> str:
                return os.path.join(new, os.path.relpath(path, old)) if path else path

            state_dict = state_dict | {
                "dirpath": new,
                "best_model_path": moved(state_dict.get("best_model_path", "")),
                "kth_best_model_path": moved(state_dict.get("kth_best_model_path", "")),
                "last_model_path": moved(state_dict.get("last_model_path", "")),
                "best_k_models": {moved(path): score for path, score in state_dict.get("best_k_models", {}).items()},
            }
        super().load_state_dict(state_dict)


def best_checkpoint(dirpath: Path) -> RunCheckpoint:
    """``best-epochNN-accX.ckpt``: the weights with the best validation accuracy so far, which the run tests."""
    return RunCheckpoint(
        dirpath=dirpath,
        filename="best-epoch{epoch:02d}-acc{val/acc:.4f}",
        auto_insert_metric_name=False,
        monitor="val/acc",
        mode="max",
    )


def last_checkpoint(dirpath: Path) -> RunCheckpoint:
    """``last.ckpt``, the resume point: rewritten at the end of every epoch.

    (ModelCheckpoint's ``save_last=True`` rewrites it only when the monitored metric improved: a stale resume
    point.) Ctrl-C, SIGTERM or kill -9 leave the last finished epoch's file; the resumed run trains the epoch it
    stopped in again, on the same batches (the order depends on the epoch alone), so it ends as an uninterrupted
    run would.
    """
    return RunCheckpoint(dirpath, "last", enable_version_counter=False, save_on_train_epoch_end=True)
