"""AtomicCheckpointIO: a checkpoint file is either the old one or the new one, never half of either."""

import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write to a temporary file beside the target, flush it to disk, then rename it over the target.

    Lightning's own save goes through a temporary file in the system's temp folder and moves it; across
    filesystems that move is a copy, which a crash (kill -9, power loss) can leave half-written. A rename
    within one folder is atomic.
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
