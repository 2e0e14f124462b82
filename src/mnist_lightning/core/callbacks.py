"""Callbacks of every training run: first batches checked, the per-epoch history (which stops a diverged run),
``--max_time`` per epoch, SIGTERM under DDP, and the progress display."""

import math
import random
import signal
import sys
import time
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ProgressBar, Timer, TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .checks import check_batch
from .errors import UserError

RECORDED = ("train/loss", "val/loss", "val/acc")


class DivergedError(UserError):
    exit_code = 1


class BatchCheck(Callback):
    """Each stage's first batch against the data module's input_shape and num_classes: a batch that breaks them is
    named with its data module, not found by a traceback from the step."""

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0:
            loader = f"{trainer.state.stage.dataloader_prefix}_dataloader"  # train_, val_ or test_dataloader
            hparams, dtype = pl_module.hparams, None if "mixed" in str(trainer.precision) else pl_module.dtype
            check_batch(batch, loader, trainer.datamodule, hparams.input_shape, hparams.num_classes, dtype)

    on_validation_batch_start = on_test_batch_start = on_train_batch_start

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A validation set without a batch, as soon as it is known: after the sanity check, or the first epoch."""
        if trainer.num_val_batches and not any(trainer.num_val_batches):  # [] until Lightning first reads it
            name = type(trainer.datamodule).__name__
            raise UserError(
                f"The data module {name} gave no validation batch (its val_dataloader() is empty), so there is "
                "nothing to choose the best checkpoint by: give it validation samples, or pass --limit_val_batches 0 "
                "to train without validation (the run then tests its last weights)."
            )

    on_train_epoch_end = on_train_start


class EpochHistory(Callback):
    """Each epoch's time and metrics, and the whole run's fit time and seed, kept in its checkpoints for a resumed
    run. A loss that is not finite stops the run before its checkpoints are written: no record gets a NaN."""

    def __init__(self, record: str | None = None) -> None:
        self.record = record  # the fingerprint of the run's record (resume.fingerprint): a resume checks it
        self.rows: list[dict] = []
        self.fit_seconds_before = 0.0  # of a resumed run's earlier segments
        self.first_step = 0  # the global step this process starts training from
        self.on_train_start()

    def fit_seconds(self) -> float:
        return self.fit_seconds_before + time.perf_counter() - self._segment_start

    def on_train_start(self, *args: Any) -> None:  # a run resumed mid-epoch has no on_train_epoch_start
        self._start = self._segment_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After validation; before the checkpoint callbacks, which Lightning runs last.
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # CUDA runs asynchronously: wait before reading the clock
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start}
        row |= {name: float(trainer.callback_metrics[name]) for name in RECORDED if name in trainer.callback_metrics}
        if not math.isfinite(loss := row.get("train/loss", 0.0)):
            hparams, precision, fix = pl_module.hparams, trainer.precision, "a smaller --lr"
            if precision in ("16-true", "bf16-true"):
                fix = f"--precision {precision.replace('true', 'mixed')} or 32-true: 16-bit weights overflow at any lr"
            raise DivergedError(
                f"Training diverged: the training loss of epoch {trainer.current_epoch} is {loss} (lr "
                f"{hparams.get('lr')}, optimizer {hparams.get('optimizer')}, precision {precision}). Nothing of that "
                f"epoch was saved: checkpoints/ holds the last finite weights, if any. Unless the data or the network "
                f"gives NaN or inf (then fix that), start a new run with {fix}."
            )
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]

    def state_dict(self) -> dict:
        return {"rows": self.rows, "fit_seconds": self.fit_seconds()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows, self.fit_seconds_before = list(state_dict["rows"]), float(state_dict.get("fit_seconds", 0.0))

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        checkpoint["record"] = self.record
        checkpoint["random_states"] = random_states()

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        self.first_step = checkpoint.get("global_step", 0)
        if "random_states" in checkpoint:
            set_random_states(checkpoint["random_states"])


class StopTogether(Callback):
    """Under DDP, a SIGTERM to any process stops all of them after the same training batch: after each one they
    agree whether any was sent it. A process that stopped alone would leave the others waiting for it forever in
    their next collective. train.py's SIGTERM handler notes the signal here (workarounds.sigterm_to_stop_together),
    and train.train asks again after the fit; cli.build_trainer adds it to distributed runs only. train.main holds
    SIGTERM (blocks it) from the fit's start to :meth:`setup`, once the processes have joined, and the processes
    Lightning starts inherit it held: one sent as they start (while they import, or the first waits for them in
    torch's C++) must not end one of them alone, which Lightning 2.6 answers by SIGKILLing every process."""

    def __init__(self) -> None:
        self.received = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one held till now is noted now

    def any_received(self, trainer: Trainer) -> bool:
        return trainer.strategy.reduce_boolean_decision(self.received, all=False)

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self.any_received(trainer):
            raise SIGTERMException  # how Lightning stops a fit on SIGTERM


def random_states() -> dict:
    """As plain values and tensors: Lightning keeps none, and a resumed run would draw other dropouts and batches."""
    kind, keys, *position = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": [kind, keys.tolist(), *position]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(tuple(item if not isinstance(item, list) else tuple(item) for item in states["python"]))
    kind, keys, *position = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *position))
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


class EpochTimer(Timer):
    """--max_time, checked at each epoch's end: a run it stops holds whole epochs. (Lightning's check after every
    batch ends the epoch where it is, as if complete: a resumed run would skip the rest of it.) It counts the whole
    run's training time, also of earlier segments run without --max_time, whose checkpoints hold no Timer's count."""

    def __init__(self, duration: Any) -> None:
        super().__init__(duration, interval="epoch")

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict) -> None:
        states = checkpoint.get("callbacks", {})
        if self.state_key not in states:  # Lightning's load_state_dict, called next, would give it none
            seconds = states.get(EpochHistory.__qualname__, {}).get("fit_seconds", 0.0)
            self.load_state_dict({"time_elapsed": {"train": seconds}})


def progress_display() -> ProgressBar:
    """A bar in a terminal; in a file (nohup, SLURM, CI), where a bar's redraws pile up, a line per epoch."""
    return ThrottledBar() if sys.stdout.isatty() else EpochLines()


# Measured: benchmarks/results/step_cost_cpu.json.  # only with_benchmarks
class ThrottledBar(TQDMProgressBar):
    """Lightning's TQDM bar, redrawn at most every 0.1 s and at a stage's end: redrawn every ``refresh_rate``
    batches, it can cost a small network's step again."""

    _drawn_at = 0.0

    def _due(self, batch_idx: int, batches: int | float) -> bool:
        due = batch_idx + 1 >= batches or time.monotonic() - self._drawn_at >= 0.1
        self._drawn_at = time.monotonic() if due else self._drawn_at
        return due

    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._due(batch_idx, self.total_train_batches):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx=0) -> None:
        if self._due(batch_idx, self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)


class EpochLines(ProgressBar):
    def disable(self) -> None:  # Lightning's call on every process but the first, which print nothing here
        pass

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    on_train_start = on_train_epoch_start  # a run resumed mid-epoch has no on_train_epoch_start

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:
            epochs = f"/{trainer.max_epochs}" if trainer.max_epochs > 0 else ""  # -1: no limit
            metrics = trainer.callback_metrics
            shown = [f"{name} {float(metrics[name]):.4f}" for name in RECORDED if name in metrics]
            seconds = f"{time.perf_counter() - self._start:.1f} s"
            print(f"Epoch {trainer.current_epoch + 1}{epochs}: {', '.join([*shown, seconds])}", flush=True)
