"""Run folders and what a run records in them: each run gets a folder of its own, its ``metrics.json`` has the
same keys for training and evaluation, and files appear whole or not at all."""

import fcntl
import json
import math
import os
import resource
import shlex
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from .errors import WriteError

RUN_RECORD = "config.yaml"  # every option of a run, resolved; written in its folder before training
LOCK_FILE = ".lock"  # held by the command writing into a run folder (see lock)


class OutputDirError(Exception):
    """The run folder cannot be used; the message says why."""


def new_run_dir(output_dir: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """The folder for a new run, made and locked (:func:`lock`): ``output_dir`` if given and unused, else a fresh
    ``runs/<timestamp>``."""
    if output_dir is None:
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        candidates = (Path(runs_root) / (stamp if n == 0 else f"{stamp}_{n}") for n in range(1000))
        output_dir = next(path for path in candidates if not path.exists())
    output_dir = Path(output_dir)
    lock(output_dir)  # first: two runs started at once into one folder must not both find it unused
    used = any(path.name != LOCK_FILE for path in output_dir.iterdir())
    if used and not clear_unstarted_run(output_dir):
        release(output_dir)
        raise OutputDirError(
            f"The output folder {output_dir} already holds files from an earlier run, and a new run would mix "
            "its results with them. Pass a new --output_dir, or leave it out to get a fresh folder under runs/."
        )
    return output_dir


# What a run leaves in its folder before its first checkpoint: the record, logs, an empty checkpoints/ (perhaps
# with the temporary file of a write that a kill interrupted).
UNSTARTED_RUN_ENTRIES = {RUN_RECORD, "logs", "checkpoints", "tensorboard", LOCK_FILE}


def clear_unstarted_run(folder: Path) -> bool:
    """Empty ``folder`` if it holds only what a run killed before its first checkpoint leaves behind (so the same
    command, or its resume, can start it over) and say whether it did. Anything else is left alone."""
    if not (folder / RUN_RECORD).is_file() or any(path.name not in UNSTARTED_RUN_ENTRIES for path in folder.iterdir()):
        return False
    if any(path.suffix == ".ckpt" for path in (folder / "checkpoints").glob("*")):
        return False
    for path in folder.iterdir():
        if path.name != LOCK_FILE:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return True


_held: dict[Path, Any] = {}  # the open lock files of this process, by folder


def lock(folder: Path) -> None:
    """Make ``folder`` and hold its lock until this process ends or :func:`release`; a second process that asks
    for it is refused with the command of the one holding it. The operating system drops the lock when its process
    ends, however it ends: a killed run leaves no stale lock. Making the folder and its lock file is also the test
    that it can be written (``os.access`` says yes to root even in /proc)."""
    key = folder.resolve()
    if key in _held:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 (held open until released: it holds the lock)
    except OSError as error:
        existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
        problem = f"{existing} is not a folder" if not existing.is_dir() else (error.strerror or str(error)).lower()
        raise OutputDirError(f"The output folder {folder} cannot be written: {problem}.") from error
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise OutputDirError(
            f"{folder} is in use by a run that has not ended ({holder}). Wait for it to end, or pass another "
            "--output_dir."
        ) from None
    handle.truncate(0)
    handle.write(f"process {os.getpid()}: {shlex.join(sys.argv)}\n")
    handle.flush()
    _held[key] = handle


def release(folder: Path | None = None) -> None:
    """Let go of ``folder``'s lock (of every folder this process holds, without one)."""
    for key in [folder.resolve()] if folder else list(_held):
        if handle := _held.pop(key, None):
            handle.close()


def discard_new_run(folder: Path) -> None:
    """Remove the folder of a new run that failed before its first checkpoint: no half-made run is left."""
    release(folder)
    if not list(folder.glob("checkpoints/*.ckpt")):
        shutil.rmtree(folder, ignore_errors=True)


def finite_or_none(data: Any) -> Any:
    """``data`` with every NaN or infinity replaced by None: JSON has no such numbers."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {key: finite_or_none(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite_or_none(value) for value in data]
    return data


def write_json(path: str | Path, data: dict) -> None:
    """Write valid JSON through a temporary file and an atomic rename, so a reader never sees half a file."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            json.dump(finite_or_none(data), tmp, indent=2, allow_nan=False)
            tmp.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp.name, 0o666 & ~umask)  # a temporary file is private (0600); give it the usual permissions
        os.replace(tmp.name, path)
    except OSError as error:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
        raise WriteError(path, error) from error


def peak_memory_mb(device: torch.device) -> dict[str, float | None]:
    """Peak resident memory of this process, and peak CUDA memory allocated by PyTorch (None off CUDA)."""
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    gpu = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"peak_host_mb": host, "peak_gpu_mb": gpu}


def run_metrics(
    *,
    test: dict[str, float],
    device: torch.device,
    epochs: int,
    history: list[dict],
    fit_seconds: float | None = None,
    best_val_acc: float | None = None,
    best_checkpoint: str | None = None,
    devices: int = 1,
    num_nodes: int = 1,
    precision: str = "32-true",
    **settings: Any,
) -> dict[str, Any]:
    """The ``metrics.json`` record of a run, with the same keys for training and evaluation."""
    return {
        "test/acc": test.get("test/acc"),  # None: not tested
        "test/loss": test.get("test/loss"),
        "best_val/acc": best_val_acc,
        "epochs": epochs,
        "fit_seconds": fit_seconds,
        "accelerator": device.type,
        "devices": devices,
        "num_nodes": num_nodes,
        "precision": precision,
        **settings,
        "best_checkpoint": best_checkpoint,
        **peak_memory_mb(device),
        "history": history,
    }
