"""EpochHistory: one row per epoch (wall time and epoch-level metrics) for ``metrics.json``."""

import time

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

RECORDED = ("train/loss", "val/loss", "val/acc")


class EpochHistory(Callback):
    """Record each epoch's wall time (training plus validation) and its epoch-level metrics."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._start = time.perf_counter()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # A run resumed from a mid-epoch checkpoint continues its epoch without on_train_epoch_start.
        self._start = time.perf_counter()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Validation has already run when this hook fires, so the time and metrics cover the whole epoch.
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # CUDA runs asynchronously: wait before reading the clock
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start}
        metrics = trainer.callback_metrics
        row.update({name: float(metrics[name]) for name in RECORDED if name in metrics})
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]

    # Kept in checkpoints, so a resumed run's metrics.json still has every epoch.
    def state_dict(self) -> dict:
        return {"rows": self.rows}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = list(state_dict["rows"])
