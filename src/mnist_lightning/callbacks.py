"""Callbacks of every training run: the per-epoch history for ``metrics.json`` (which also stops a diverged run),
the learning-rate schedule's length on a resumed run that trains longer, and the progress display: a bar in a
terminal, a line per epoch in a log file."""

import math
import sys
import time
from datetime import timedelta
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar, Timer, TQDMProgressBar

RECORDED = ("train/loss", "val/loss", "val/acc")


class DivergedError(Exception):
    """The training loss stopped being a finite number; the message says when and what to change."""

    exit_code = 1


class EpochHistory(Callback):
    """Record each epoch's wall time (training plus validation) and its epoch-level metrics, and the run's fit
    time summed over all its segments (a resumed run continues the clock of the checkpoint it starts from).

    An epoch whose training loss is not finite stops the run before its checkpoints are written: ``last.ckpt``
    keeps the last finite weights, and no record gets a NaN.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.fit_seconds_before = 0.0  # fit time of the earlier segments of a resumed run
        self.first_step = 0  # the global step this process starts training from: a resumed run's checkpoint's
        self._start = self._segment_start = time.perf_counter()

    def fit_seconds(self) -> float:
        """Fit time of the whole run so far, every resumed segment included."""
        return self.fit_seconds_before + time.perf_counter() - self._segment_start

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # A run resumed from a mid-epoch checkpoint continues its epoch without on_train_epoch_start.
        self._start = self._segment_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Validation has already run when this hook fires, so the time and metrics cover the whole epoch.
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # CUDA runs asynchronously: wait before reading the clock
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start}
        metrics = trainer.callback_metrics
        row.update({name: float(metrics[name]) for name in RECORDED if name in metrics})
        loss = row.get("train/loss")
        if loss is not None and not math.isfinite(loss):
            # Raised here, before the checkpoint callbacks (which Lightning runs last) save NaN weights.
            hparams = pl_module.hparams
            raise DivergedError(
                f"Training diverged: the training loss of epoch {trainer.current_epoch} is {loss} "
                f"(lr {hparams.get('lr')}, optimizer {hparams.get('optimizer')}). Nothing of that epoch was saved: "
                "checkpoints/ holds the last weights that were finite, if any. Start a new run with "
                + (
                    f"--precision {trainer.precision.replace('-true', '-mixed')} or 32-true: weights held in 16 bits "
                    f"(--precision {trainer.precision}) overflow, whatever the learning rate."
                    if trainer.precision in ("16-true", "bf16-true")
                    else "a smaller --lr."
                )
            )
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]

    # Kept in checkpoints, so a resumed run's metrics.json still has every epoch and the whole fit time.
    def state_dict(self) -> dict:
        return {"rows": self.rows, "fit_seconds": self.fit_seconds()}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        self.first_step = checkpoint.get("global_step", 0)

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = list(state_dict["rows"])
        self.fit_seconds_before = float(state_dict.get("fit_seconds", 0.0))


class EpochTimer(Timer):
    """``--max_time``, checked at the end of each epoch, so that a run stopped by it holds whole epochs.

    Lightning's own check, after every batch, ends the epoch where it is as if it were complete: ``metrics.json``
    would count a partial epoch as one, and a resumed run would skip the rest of it. A resumed run whose time is
    already used up (the Timer counts the whole run's time, kept in its checkpoints) takes no step at all.
    """

    def __init__(self, duration: str | dict | timedelta) -> None:
        super().__init__(duration=duration, interval="epoch")

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if self.time_remaining() <= 0:
            trainer.should_stop = True


def progress_display() -> ProgressBar:
    """A bar when the output goes to a terminal; one line per epoch when it goes to a file (nohup, SLURM, CI),
    where a bar's redraws would be lost or pile up."""
    return ThrottledBar() if sys.stdout.isatty() else EpochLines()


class ThrottledBar(TQDMProgressBar):
    """Lightning's TQDM bar, redrawn at most every ``interval`` seconds and at each stage's last batch.

    Lightning's bar redraws itself and re-reads every metric after each batch (or every ``refresh_rate``
    batches, a count that suits no batch size); for a small network that costs as much as the training step.
    TQDM, unlike Rich, comes with Lightning, so every installation shows the same bar.
    """

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__()
        self.interval = interval
        self._drawn_at = 0.0

    def _due(self, batch_idx: int, batches: int | float) -> bool:
        now = time.monotonic()
        if batch_idx + 1 >= batches or now - self._drawn_at >= self.interval:
            self._drawn_at = now
            return True
        return False

    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._due(batch_idx, self.total_train_batches):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx=0) -> None:
        if self._due(batch_idx, self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)


class EpochLines(ProgressBar):
    """Progress for output that is not a terminal: one line per epoch as it ends, with its epoch metrics."""

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._start = time.perf_counter()

    def disable(self) -> None:  # Lightning disables the progress display on every process but the first
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._enabled:
            return
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        metrics = trainer.callback_metrics
        shown = [f"{name} {float(metrics[name]):.4f}" for name in RECORDED if name in metrics]
        seconds = time.perf_counter() - self._start
        print(f"Epoch {trainer.current_epoch + 1}{epochs}: {', '.join([*shown, f'{seconds:.1f} s'])}", flush=True)
