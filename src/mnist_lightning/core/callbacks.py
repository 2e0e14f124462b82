"""Callbacks of every training run: first batches checked, the per-epoch history (which stops a diverged run),
SIGTERM under DDP, and the progress display."""

import math
import random
import signal
import sys
import time

import numpy as np
import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .checks import no_batch
from .errors import UserError

RECORDED = ("train/loss", "val/loss", "val/acc")


class DivergedError(UserError):
    exit_code = 1


class BatchCheck(Callback):
    """Each stage's first batch against what the data module says (checks.DataContract): a batch that breaks it is
    named with its data module, not found by a traceback from the step."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if batch_idx > 0:
            return
        shape, classes, dtype = tuple(pl_module.hparams.input_shape), pl_module.hparams.num_classes, pl_module.dtype
        x, y = batch if isinstance(batch, list | tuple) and len(batch) == 2 else (batch, None)
        pair = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        # Samples of the weights' dtype: Lightning gives a -true precision's floats that dtype; autocast takes float32.
        ok = pair and x.shape[1:] == shape and x.dtype == dtype and y.dtype in (torch.long, torch.uint8)
        if not (ok and y.shape == x.shape[:1] and x.isfinite().all() and ((y >= 0) & (y < classes)).all()):
            got = " and ".join(f"{t.dtype} {tuple(t.shape)}" for t in batch) if pair else f"a {type(batch).__name__}"
            raise UserError(
                f"The first batch of {type(trainer.datamodule).__name__}.{trainer.state.stage.dataloader_prefix}"
                f"_dataloader() holds {got}, not finite {dtype} samples of its input_shape {shape} and int64 labels "
                f"below its num_classes {classes}."
            )

    on_validation_batch_start = on_test_batch_start = on_train_batch_start

    def on_train_start(self, trainer, pl_module):
        """A validation set without a batch, as soon as it is known: after the sanity check, or the first epoch."""
        if trainer.num_val_batches and not any(trainer.num_val_batches):  # [] until Lightning first reads it
            raise no_batch(trainer, "val")

    on_train_epoch_end = on_train_start


class EpochHistory(Callback):
    """Each epoch's time and metrics (printed as a line where the progress display is EpochLines), and the whole
    run's fit time and seed, kept in its checkpoints for a resumed run. A loss that is not finite stops the run before
    its checkpoints are written: no record gets a NaN."""

    def __init__(self, record: str | None = None) -> None:
        # record: the fingerprint of the run's record (resume.fingerprint), which a resume checks; fit_seconds_before:
        # of a resumed run's earlier segments.
        self.record, self.rows, self.fit_seconds_before = record, [], 0.0
        self.on_train_start()

    def fit_seconds(self) -> float:
        return self.fit_seconds_before + time.perf_counter() - self._segment_start

    def on_train_start(self, *args):  # a run resumed mid-epoch has no on_train_epoch_start
        self._start = self._segment_start = time.perf_counter()

    def on_train_epoch_start(self, *args):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        # After validation; before the checkpoint callbacks, which Lightning runs last. float() waits for the device
        # (CUDA runs asynchronously) before the clock is read.
        metrics = {name: float(trainer.callback_metrics[name]) for name in RECORDED if name in trainer.callback_metrics}
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start} | metrics
        if not math.isfinite(loss := metrics.get("train/loss", 0)):
            raise DivergedError(
                f"Training diverged ({loss}): use a smaller --lr; with 16-bit weights, a -mixed or 32-true --precision."
            )
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]
        if isinstance(trainer.progress_bar_callback, EpochLines) and trainer.is_global_zero:
            epochs = f"/{trainer.max_epochs}" * (trainer.max_epochs > 0)  # -1: no limit
            shown = "".join(f"{name} {value:.4f}, " for name, value in metrics.items())
            print(f"Epoch {row['epoch'] + 1}{epochs}: {shown}{row['seconds']:.1f} s", flush=True)

    def state_dict(self) -> dict:
        return {"rows": self.rows, "fit_seconds": self.fit_seconds()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows, self.fit_seconds_before = state_dict["rows"], state_dict.get("fit_seconds", 0.0)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        # The random generators' states, as plain values and tensors: Lightning keeps none, and a resumed run would
        # draw other dropouts and batches.
        kind, keys, *rest = np.random.get_state()  # its key as a list of ints, which set_state takes back
        states = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": [kind, keys.tolist(), *rest]}
        states["cuda"] = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
        checkpoint |= {"record": self.record, "random_states": states}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        states = checkpoint["random_states"]
        torch.set_rng_state(states["torch"])
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        if len(states.get("cuda", ())) == torch.cuda.device_count() > 0:  # the GPUs it was saved on
            torch.cuda.set_rng_state_all(states["cuda"])


class StopTogether(Callback):
    """Under DDP, a SIGTERM to any process stops all of them after the same training batch: after each one they
    agree whether any was sent it. A process that stopped alone would leave the others waiting for it forever in
    their next collective. train.py's SIGTERM handler notes the signal here (workarounds.sigterm_to_stop_together),
    and train.train asks again after the fit. cli.build_training adds it to distributed runs only, and holds
    SIGTERM (blocks it) from then to :meth:`setup`, once the processes have joined, and the processes
    Lightning starts inherit it held: one sent as they start (while they import, or the first waits for them in
    torch's C++) must not end one of them alone, which Lightning 2.6 answers by SIGKILLing every process."""

    received = False  # on the class: noted by train.py's handler from the fit's start (others may still be joining)

    def setup(self, trainer, pl_module, stage):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one held till now is noted now

    @staticmethod
    def any_received(trainer) -> bool:
        return trainer.strategy.reduce_boolean_decision(StopTogether.received, all=False)

    def on_train_batch_end(self, trainer, *args):
        if self.any_received(trainer):
            raise SIGTERMException  # how Lightning stops a fit on SIGTERM


def progress_display() -> ProgressBar:
    """A bar in a terminal; in a file (nohup, SLURM, CI), where a bar's redraws pile up, a line per epoch."""
    return ThrottledBar() if sys.stdout.isatty() else EpochLines()


# Measured: benchmarks/results/step_cost_cpu.json.  # only with_benchmarks
class ThrottledBar(TQDMProgressBar):
    """Lightning's TQDM bar, redrawn at most every 0.1 s and at a stage's end: redrawn every ``refresh_rate``
    batches, it can cost a small network's step again."""

    _drawn_at = 0.0

    def _due(self, batch_idx, batches):
        if due := batch_idx + 1 >= batches or time.monotonic() - self._drawn_at >= 0.1:
            self._drawn_at = time.monotonic()
        return due

    def on_train_batch_end(self, *args):  # (trainer, pl_module, outputs, batch, batch_idx)
        if self._due(args[4], self.total_train_batches):
            super().on_train_batch_end(*args)

    def on_validation_batch_end(self, *args):
        if self._due(args[4], self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(*args)


class EpochLines(ProgressBar):
    """No bar: EpochHistory prints a line as each epoch ends."""

    def disable(self):  # Lightning's call on every process but the first, which print nothing
        pass
