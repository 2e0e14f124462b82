"""Run folders and what a run records in them: each run gets a folder of its own, its ``metrics.json`` has the
same keys for training and evaluation, and files appear whole or not at all."""

import glob
import json
import os
import resource
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
# What a run killed before its first checkpoint leaves in its folder (and perhaps its record's temporary file).
UNSTARTED_RUN_ENTRIES = {RUN_RECORD, "logs", "checkpoints", "tensorboard", LOCK_FILE}
_held: dict[Path, FileLock] = {}  # the folders this process holds


class OutputDirError(UserError):
    """The run folder cannot be used; the message says why."""


class FolderInUse(OutputDirError):
    """Another command, still running, holds the folder."""


def new_run_dir(output_dir: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """The folder for a new run, made and locked: ``output_dir`` if given and unused, else a new runs/<time>."""
    if output_dir is None:
        stamp = Path(runs_root, datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
        for output_dir in (stamp, *(Path(f"{stamp}_{n}") for n in range(1, 1000))):
            with suppress(OSError):  # made here, not merely found free: commands started in one second get one each
                output_dir.mkdir(parents=True)
                break
            if not output_dir.exists():  # cannot be made (not taken): lock says why
                break
    output_dir = Path(output_dir)
    lock(output_dir)  # first: two runs started at once into one folder must not both find it unused
    # A write's temporary file is what a run killed while writing its record leaves: it goes.
    kept = [path for path in output_dir.iterdir() if path.name != LOCK_FILE and not is_temporary(path)]
    if kept and not clear_unstarted_run(output_dir):
        release(output_dir)
        raise OutputDirError(
            f"The output folder {output_dir} already holds files from an earlier run. Pass a new --output_dir, or "
            "leave it out to get a fresh folder under runs/."
        )
    for path in filter(is_temporary, output_dir.iterdir()):
        path.unlink()
    return output_dir


def clear_unstarted_run(folder: Path) -> bool:
    """Empty ``folder`` if it holds only what a run killed before its first checkpoint leaves, to start it over."""
    if not (folder / RUN_RECORD).is_file() or any(folder.glob("checkpoints/*.ckpt")):
        return False
    entries = [path for path in folder.iterdir() if path.name != LOCK_FILE]
    if any(path.name not in UNSTARTED_RUN_ENTRIES and not is_temporary(path) for path in entries):
        return False
    for path in entries:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return True


def refuse_inside_a_running_run(folder: Path) -> None:
    """``folder``, or one above it, locked by another command: refused, naming that command."""
    for parent in (folder.resolve(), *folder.resolve().parents):
        if parent not in _held and (parent / LOCK_FILE).is_file():
            with suppress(OSError):  # one this process cannot open or read: not known held
                try:
                    with FileLock(parent / LOCK_FILE, timeout=0):
                        pass  # free
                except Timeout:
                    raise in_use(parent) from None


def in_use(folder: Path) -> FolderInUse:
    command = (folder / LOCK_FILE).read_text().strip() or "another process"
    return FolderInUse(
        f"{folder} is in use by another command that has not ended ({command}). Wait for it to end, or pass another "
        "--output_dir."
    )


def lock(folder: Path) -> None:
    """Make ``folder`` and lock it until :func:`release` or the process ends, however (the OS drops the lock), naming
    the holder to others. Making the lock file tries that it can be written (os.access says yes to root in /proc)."""
    if folder.resolve() in _held:
        return
    path, held = os.fsencode(folder.absolute()), FileLock(folder / LOCK_FILE)
    existing = next(parent for parent in (folder, *folder.parents) if os.path.exists(parent))
    longest, room = os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX") - 1
    try:  # said before anything is made: the records name their files as text, and a run's files need room for names
        if not existing.is_dir():
            raise ValueError(f"{existing} is not a folder")
        if os.fsdecode(path) != path.decode(errors="replace") or max(map(len, path.split(b"/"))) > longest:
            raise ValueError(f"its path must be UTF-8 text, with names of at most {longest} bytes")
        if len(path) + longest > room:
            raise ValueError(f"its path must be at most {room - longest} bytes long (this system's limit)")
        refuse_inside_a_running_run(folder)
        folder.mkdir(parents=True, exist_ok=True)
        held.acquire(timeout=0)
        # The command line as text, whatever bytes its arguments hold (a file name that is not UTF-8, say).
        (folder / LOCK_FILE).write_text(f"process {os.getpid()}: {shlex.join(sys.argv)}\n", errors="backslashreplace")
    except Timeout:
        raise in_use(folder) from None
    except (OSError, ValueError) as error:
        problem = getattr(error, "strerror", None) or error
        raise OutputDirError(
            f"The output folder {folder} cannot be written: {problem}. Pass another --output_dir."
        ) from error
    _held[folder.resolve()] = held


def release(folder: Path | None = None) -> None:
    """Let go of ``folder``'s lock (without one: of every folder this process holds)."""
    for key in [folder.resolve()] if folder else list(_held):
        if held := _held.pop(key, None):
            held.release()


def discard_new_run(folder: Path) -> None:
    """A new run that failed before its resume point or its results: no half-made run is left to block its restart."""
    release(folder)
    if not any((folder / name).is_file() for name in ("checkpoints/last.ckpt", "metrics.json")):
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def replaced(path: Path) -> Iterator[IO[bytes]]:
    """A file that replaces ``path`` once written whole: written beside it, synced to disk and renamed over it
    (atomic), so a reader, a Ctrl-C or a crash finds the old file or the new one, never half of one."""
    # A name of its own: two commands writing one file (two predicts' --output) must not write into each other.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for left in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):  # by a write killed midway (kill -9)
            if (pid := left.name.split(".")[-2]).isdigit() and not process_exists(int(pid)):
                left.unlink(missing_ok=True)
        with open(temporary, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise WriteError(path, error) from error
    finally:  # after a failed or stopped write (after the rename, there is no temporary file)
        temporary.unlink(missing_ok=True)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether there is such a process
    except OSError as error:
        return isinstance(error, PermissionError)  # another user's
    return True


def is_temporary(path: Path) -> bool:
    """A file :func:`replaced` is writing, or one a killed write left."""
    return path.name.startswith(".") and path.name.endswith(".partial") and path.is_file()


def write_json(path: str | Path, data: dict) -> None:
    with replaced(Path(path)) as file:
        file.write(json_text(data).encode())


def json_text(data: dict) -> str:
    """``data`` as valid JSON: NaN and infinities, which JSON lacks, as null."""
    return json.dumps(json.loads(json.dumps(data), parse_constant=lambda name: None), indent=2) + "\n"


def run_metrics(
    trainer: Trainer, model: LightningModule, *, test: dict, epochs: int, history: list | None = None, **settings: Any
) -> dict[str, Any]:
    """The ``metrics.json`` record of a run, with the same keys for training and evaluation (None: not measured)."""
    device = trainer.strategy.root_device
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    gpu = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    record = {"test/acc": test.get("test/acc"), "test/loss": test.get("test/loss"), "accelerator": device.type}
    record |= {"best_val/acc": settings.pop("best_val_acc", None), "fit_seconds": None, "best_checkpoint": None}
    record |= {"num_nodes": trainer.num_nodes, "epochs": epochs, "history": history or []}
    record |= {"devices": trainer.num_devices, "precision": trainer.precision}
    record |= {"batch_size": trainer.datamodule.hparams.batch_size} | settings
    record |= {"peak_host_mb": host, "peak_gpu_mb": gpu}
    if model.test_confusion_matrix is not None:  # [true, predicted] counts: the plots can be drawn from the record
        record["test/confusion_matrix"] = model.test_confusion_matrix.tolist()
    return record


class CSVLog(CSVLogger):
    """Lightning's CSVLogger, a failed write a WriteError naming the file, which is put back as it was (no row cut
    short is left for a reader to take for a number); its rows are dropped, which Lightning's clean-up would retry."""

    @rank_zero_only
    def log_hyperparams(self, params: Any = None) -> None:
        try:
            super().log_hyperparams(params)
        except OSError as error:
            raise WriteError(Path(self.log_dir, "hparams.yaml"), error) from error

    @rank_zero_only
    def save(self) -> None:  # Lightning calls it at every logging step
        experiment = self.experiment
        path = Path(experiment.metrics_file_path)
        size = path.stat().st_size if path.is_file() else None
        # Lightning appends its rows, or rewrites the whole file when a new column comes: only then is it read here.
        new_column = {key for row in experiment.metrics for key in row} - set(experiment.metrics_keys)
        before = path.read_bytes() if size and new_column else None
        try:
            super().save()
        except OSError as error:
            experiment.metrics.clear()
            with suppress(OSError):
                if size is None:  # it was not there
                    path.unlink()
                elif before is not None:
                    path.write_bytes(before)
                else:
                    os.truncate(path, size)
            raise WriteError(path, error) from error
