"""Checkpoints: the one loader every entry point uses, atomic writes, and ``last.ckpt``, the resume point."""

import os
import pickle
import re
import signal
import sys
import threading
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jsonargparse import ArgumentParser
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .errors import UserError
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
        except BaseException:  # Ctrl-C, a full disk: the previous checkpoint stays, and no partial file
            temporary.unlink(missing_ok=True)
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


class LastCheckpoint(RunCheckpoint):
    """``checkpoints/last.ckpt``, the resume point: rewritten at the end of every epoch, and when Ctrl-C or SIGTERM
    stops the run.

    ModelCheckpoint's own ``save_last=True`` rewrites it only in epochs where the monitored metric improved:
    a stale resume point. Lightning runs checkpoint callbacks after the others, so the file also holds the
    state of the other callbacks for the epoch (the metrics history, for one).

    Ctrl-C and SIGTERM (SLURM, ``docker stop``) during training do not stop the run where they land: the run
    finishes the batch in progress (and the epoch's validation, if it has begun), saves ``last.ckpt`` and stops,
    so that weights, optimizer, schedule and data position in the file agree and a resumed run trains on the
    very batches an uninterrupted one would. A second Ctrl-C stops at once, keeping the previous ``last.ckpt``.
    """

    def __init__(self, dirpath: Path, resume_hint: str) -> None:
        super().__init__(dirpath, "last", enable_version_counter=False, save_on_train_epoch_end=True)
        self.resume_hint = resume_hint
        self.stop_signal: int | None = None  # the signal that asked the run to stop, once one has
        self._saved_for_stop = False
        self.reported = False  # whether on_exception has told the user where things stand
        self._handlers: dict[int, Any] = {}
        self._loader_states: list[dict] = []  # the train loader's position, from the checkpoint resumed

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(trainer, pl_module, checkpoint)
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
        self._loader_states = fit_loop.get("state_dict", {}).get("combined_loader", [])

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        # Lightning hands a stateful train loader its saved position only if the loader is built after the loop
        # state is restored; configure_optimizers' estimated_stepping_batches builds it before. Hand it over
        # here, before the first batch is drawn, so a run resumed mid-epoch continues with the right batch.
        loaders = trainer.train_dataloader
        loaders = list(loaders) if isinstance(loaders, list | tuple) else [loaders]
        stateful = [loader for loader in loaders if hasattr(loader, "load_state_dict")]
        if self._loader_states and len(stateful) == len(self._loader_states):
            for loader, state in zip(stateful, self._loader_states, strict=True):
                loader.load_state_dict(state)
        self._loader_states = []
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, lambda signum, frame: self._request_stop(trainer, signum))

    def _request_stop(self, trainer: Trainer, signum: int) -> None:
        if self.stop_signal is not None:  # a second signal: stop now, without saving a half-done step
            self._restore_handlers()
            raise KeyboardInterrupt
        self.stop_signal = signum
        if signum == signal.SIGTERM and trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signum)  # as Lightning's own SIGTERM handler: pass it to the DDP ranks
        if trainer.is_global_zero:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            print(
                f"\n{name}: stopping after this batch to save progress ({name} again stops at once, without saving).",
                file=sys.stderr,
                flush=True,
            )

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        if self.stop_signal is None:
            return
        batch_idx = kwargs.get("batch_idx", args[-1] if args else 0)
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        validates_next = isinstance(trainer.val_check_batch, int) and (batch_idx + 1) % trainer.val_check_batch == 0
        # Not before validation: a checkpoint cannot hold half-computed validation metrics. The epoch's own
        # end saves and stops instead (on_train_epoch_end).
        if not last_of_epoch and not validates_next:
            stop_after_this_batch(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)  # writes last.ckpt
        if self.stop_signal is not None:
            self._saved_for_stop = True
            stop_after_this_batch(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, KeyboardInterrupt | SystemExit):
            self._restore_handlers()
            return  # an error: the run failed, and its message says why
        path = Path(self.dirpath) / "last.ckpt"
        if isinstance(exception, KeyboardInterrupt):
            self.stop_signal = signal.SIGINT
        elif self.stop_signal is not None and not self._saved_for_stop:
            try:
                trainer.save_checkpoint(path, weights_only=False)  # stopped between batches: a consistent state
                self._saved_for_stop = True
            except KeyboardInterrupt:  # Ctrl-C again during the save: the previous last.ckpt stays
                pass
        self._restore_handlers()
        self.reported = True
        if not trainer.is_global_zero:
            return
        if path.is_file():
            saved = f"progress saved to {path}" if self._saved_for_stop else f"{path} holds the progress saved before"
            print(f"\nStopped; {saved}. Resume with:\n  {self.resume_hint}", file=sys.stderr)
        else:
            print(
                "\nStopped before the first epoch ended: there is no progress to resume. Run the same command "
                "again to start over.",
                file=sys.stderr,
            )

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore_handlers()

    def _restore_handlers(self) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers = {}


def stop_after_this_batch(trainer: Trainer) -> None:
    """Lightning's own SIGTERM stop: its loops raise SIGTERMException once the batch (or epoch) in progress is done,
    after the schedulers have stepped. ``Trainer.received_sigterm`` has no setter, so the flag is set where
    Lightning's signal handler sets it."""
    trainer._signal_connector.received_sigterm = True
