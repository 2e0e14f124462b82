"""Run folders and what a run records in them: each run gets a folder of its own, its ``metrics.json`` has the
same keys for training and evaluation, and files appear whole or not at all."""

import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import torch
from filelock import FileLock, Timeout
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import rank_zero_only

from .errors import UserError, WriteError

RUN_RECORD = "config.yaml"  # every option of a run, resolved; written in its folder before training
LOCK_FILE = ".lock"  # held by the command writing into a run folder (see lock)
# What a run killed before its first checkpoint leaves in its folder.
UNSTARTED_RUN_ENTRIES = {RUN_RECORD, "logs", "checkpoints"}
_held: list[FileLock] = []  # the folders this process holds


def new_run_dir(output_dir: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """The folder for a new run, made and locked: ``output_dir`` if given and unused, else a new runs/<time>."""
    if output_dir is None:
        stamp = Path(runs_root, datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
        for n in range(1000):
            output_dir = Path(f"{stamp}_{n}" if n else stamp)
            with suppress(OSError):  # made here, not merely found free: commands started in one second get one each
                output_dir.mkdir(parents=True)
                break
            if not output_dir.exists():  # cannot be made (not taken): lock says why
                break
    lock(output_dir := Path(output_dir))  # first: two runs started at once into one folder must not both find it unused
    if not clear_unstarted_run(output_dir):
        raise UserError(f"{output_dir} already holds files from an earlier run: pass another --output_dir.")
    return output_dir


def clear_unstarted_run(folder: Path) -> bool:
    """Whether ``folder`` can take a run: it holds nothing, or only what a run killed before its first checkpoint
    leaves, which is cleared to start it over."""
    names = {path.name for path in folder.iterdir()} - {LOCK_FILE}
    if (names and not {RUN_RECORD} <= names <= UNSTARTED_RUN_ENTRIES) or any(folder.glob("checkpoints/*.ckpt")):
        return False
    for name in names - {RUN_RECORD}:  # logs/ and checkpoints/
        shutil.rmtree(folder / name)
    (folder / RUN_RECORD).unlink(missing_ok=True)
    return True


def lock(folder: Path) -> None:
    """Make ``folder`` and lock it until :func:`release` or the process ends, however (the OS drops the lock), naming
    the holder to others: refused if another command holds it, or a folder above it. The lock holder removes the
    temporary files that a write killed midway left (see :func:`replaced`)."""
    try:
        # A lock is tried with a second's patience: other commands starting look at it too, holding it an instant.
        for parent in folder.resolve().parents:  # one this process holds is free to it (is_singleton: reentrant)
            if (parent / LOCK_FILE).is_file():
                with suppress(PermissionError):  # another user's, or another program's: not this template's run
                    FileLock(parent / LOCK_FILE, is_singleton=True).acquire(timeout=1).lock.release()
        folder.mkdir(parents=True, exist_ok=True)
        _held.append(FileLock(folder / LOCK_FILE, is_singleton=True).acquire(timeout=1).lock)
        # The command line as text, whatever bytes its arguments hold (a file name that is not UTF-8, say).
        (folder / LOCK_FILE).write_text(f"process {os.getpid()}: {shlex.join(sys.argv)}\n", errors="backslashreplace")
    except Timeout as error:  # the lock file names its holder
        holder = Path(error.lock_file).read_text().strip() or "another process"
        raise UserError(f"{Path(error.lock_file).parent} is in use by {holder}, which has not ended.") from None
    except OSError as error:  # the OS's own reason: no such folder, permission denied, file name too long...
        raise UserError(f"{folder} cannot be written: {error.strerror}. Pass another --output_dir.") from error
    for left in [*folder.glob(".*.partial"), *folder.glob("checkpoints/.*.partial")]:  # see replaced
        left.unlink()


def release() -> None:
    """Let go of every folder this process holds (errors.run_main does, as a command ends)."""
    while _held:
        _held.pop().release(force=True)


def discard_new_run(folder: Path) -> None:
    """A new run that failed before its resume point or its results: no half-made run is left to block its restart."""
    if not any((folder / name).is_file() for name in ("checkpoints/last.ckpt", "metrics.json")):
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def replaced(path: Path) -> Iterator[IO[bytes]]:
    """A file that replaces ``path`` once written whole: written beside it, synced to disk and renamed over it
    (atomic), so a reader, a Ctrl-C or a crash finds the old file or the new one, never half of one. What a write
    killed midway (kill -9) leaves is a hidden ``.partial`` file, which the next lock of its folder removes."""
    # A name of its own: two commands writing one file (two predicts' --output) must not write into each other.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise WriteError(path, error) from error
    finally:  # after a failed or stopped write (after the rename, there is no temporary file)
        with suppress(OSError):  # none was made: the folder could not be (its reason is the error above)
            temporary.unlink(missing_ok=True)


def write_json(path: str | Path, data: dict) -> None:
    with replaced(Path(path)) as file:
        file.write(json_text(data).encode())


def json_text(data: dict) -> str:
    """``data`` as valid JSON: NaN and infinities, which JSON lacks, as null."""
    return json.dumps(json.loads(json.dumps(data), parse_constant=lambda name: None), indent=2) + "\n"


def run_metrics(trainer: Trainer, model: LightningModule, test: dict, **record: Any) -> dict[str, Any]:
    """The ``metrics.json`` record of a run, with the same keys for training and evaluation (None: not measured)."""
    device = trainer.strategy.root_device
    record = dict.fromkeys(["test/acc", "test/loss", "best_val/acc", "fit_seconds"]) | {"history": []} | test | record
    record |= {
        "accelerator": device.type,
        "devices": trainer.num_devices,
        "num_nodes": trainer.num_nodes,
        "precision": trainer.precision,
        "batch_size": trainer.datamodule.hparams.batch_size,
        "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
    }
    # with_plots:
    if model.test_confusion_matrix is not None:  # [true, predicted] counts: the plots can be drawn from the record
        record["test/confusion_matrix"] = model.test_confusion_matrix.tolist()
    # end with_plots
    return record


class CSVLog(CSVLogger):
    """Lightning's CSVLogger, a failed write a WriteError naming the file, which is put back as it was (no row cut
    short is left for a reader to take for a number); its rows are dropped, which Lightning's clean-up would retry."""

    def log_hyperparams(self, params: Any = None) -> None:
        try:
            super().log_hyperparams(params)
        except OSError as error:
            raise WriteError(Path(self.log_dir, "hparams.yaml"), error) from error

    @rank_zero_only
    def save(self) -> None:  # Lightning calls it at every logging step
        experiment, path = self.experiment, Path(self.experiment.metrics_file_path)
        size = path.stat().st_size if path.is_file() else 0  # (0: none, as Lightning writes a header first)
        # Lightning appends its rows, or rewrites the whole file when a new column comes: only then is it read here
        # (read at every step, a long run's log would cost more at each).
        new_column = not set().union(*experiment.metrics) <= set(experiment.metrics_keys)
        before = path.read_bytes() if size and new_column else None
        try:
            super().save()
        except OSError as error:
            experiment.metrics.clear()
            with suppress(OSError):  # as it was (emptied if it was not there: Lightning writes its header first)
                path.write_bytes(before) if before else os.truncate(path, size)
            raise WriteError(path, error) from error
