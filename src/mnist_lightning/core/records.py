"""What a run records, whole or not at all: its ``config.yaml``, its ``metrics.json`` (the same keys for training and
evaluation) and any file written through :func:`replaced`."""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import torch
from lightning.pytorch import LightningModule, Trainer

from .errors import WriteError

RUN_RECORD = "config.yaml"  # every option of a run, resolved; written in its folder before training


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
    """The ``metrics.json`` record of a run: what the model logged in its test, the best score of the metric it
    monitors (``best_<monitor>``), the run's history and where it ran; the same keys for training and evaluation
    (None: not measured)."""
    device = trainer.strategy.root_device
    best = {f"best_{model.monitor}": None} if getattr(model, "monitor", None) else {}
    record = best | {"fit_seconds": None, "history": []} | test | record
    record |= {
        "accelerator": device.type,
        "devices": trainer.num_devices,
        "num_nodes": trainer.num_nodes,
        "precision": trainer.precision,
        "batch_size": trainer.datamodule.hparams.batch_size,
        "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
    }
    # with_plots:
    if getattr(model, "test_confusion_matrix", None) is not None:  # [true, predicted] counts: plots drawn from it
        record["test/confusion_matrix"] = model.test_confusion_matrix.tolist()
    # end with_plots
    return record


def scores(metrics: dict[str, float]) -> str:
    """Metrics as the results line says them: ``test/loss 0.2912, test/f1 0.9228``."""
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
