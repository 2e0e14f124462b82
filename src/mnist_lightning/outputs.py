"""Run folders and result files: each run gets a folder of its own; files appear whole or not at all."""

import json
import os
import resource
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from .errors import UserError


def new_run_dir(output_dir: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """The folder for a new run: ``output_dir`` if given and unused, else a fresh ``runs/<timestamp>``."""
    if output_dir is None:
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        candidates = (Path(runs_root) / (stamp if n == 0 else f"{stamp}_{n}") for n in range(1000))
        output_dir = next(path for path in candidates if not path.exists())
    output_dir = Path(output_dir)
    check_writable(output_dir)
    if output_dir.exists() and any(output_dir.iterdir()):
        raise UserError(
            f"The output folder {output_dir} already holds files from an earlier run, and a new run would mix "
            "its results with them. Pass a new --output_dir, or leave it out to get a fresh folder under runs/."
        )
    return output_dir


def check_writable(folder: Path) -> None:
    """Refuse, before any training, a folder that cannot be created or written."""
    existing = next(parent for parent in (folder, *folder.parents) if parent.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(
            f"The output folder {folder} cannot be written: {existing} is "
            f"{'not a folder' if not existing.is_dir() else 'not writable'}. Pass a writable --output_dir."
        )


def write_json(path: str | Path, data: dict) -> None:
    """Write JSON through a temporary file and an atomic rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
        json.dump(data, tmp, indent=2)
        tmp.write("\n")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # a temporary file is private (0600); give it the usual permissions
    os.replace(tmp.name, path)


def peak_memory_mb(device) -> dict[str, float | None]:
    """Peak resident memory of this process, and peak CUDA memory allocated by PyTorch (None off CUDA)."""
    import torch

    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    gpu = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"peak_host_mb": host, "peak_gpu_mb": gpu}
