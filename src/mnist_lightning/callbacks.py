"""EpochHistory: one row per epoch for metrics.json; LastCheckpoint: the resume point;
TimedProgressBar: Lightning's tqdm bar, redrawn by the clock."""

import sys
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.trainer.states import TrainerFn

RECORDED = ("train/loss", "val/loss", "val/acc")
STEP_LOSS = "train/loss_step"


class EpochHistory(Callback):
    """Record each epoch's wall time (training plus validation) and its epoch-level metrics."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Validation has already run when this hook fires, so the time and metrics cover the whole epoch.
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # CUDA runs asynchronously: wait before reading the clock
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start}
        metrics = trainer.callback_metrics
        row.update({name: float(metrics[name]) for name in RECORDED if name in metrics})
        self.rows.append(row)

    # Kept in checkpoints, so a resumed run's metrics.json still has every epoch.
    def state_dict(self) -> dict:
        return {"rows": self.rows}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = list(state_dict["rows"])


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``, the resume point: rewritten at the end of every epoch, and on Ctrl-C or SIGTERM.

    ModelCheckpoint's own ``save_last=True`` rewrites it only in epochs where the monitored metric improved:
    a stale resume point. Lightning runs checkpoint callbacks after the others, so the file also holds the
    epoch's EpochHistory row.
    """

    def __init__(self, output_dir: Path) -> None:
        checkpoints = output_dir / "checkpoints"
        super().__init__(checkpoints, "last", enable_version_counter=False, save_on_train_epoch_end=True)
        self.output_dir = output_dir

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning turns SIGTERM into SIGTERMException at the next batch boundary, so the state is consistent.
        if not isinstance(exception, KeyboardInterrupt | SystemExit) or trainer.state.fn != TrainerFn.FITTING:
            return
        path = Path(self.dirpath) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
        if trainer.is_global_zero:
            print(
                f"\nInterrupted; progress saved to {path}. Resume with:\n"
                f"  python scripts/train.py --output_dir {self.output_dir} --ckpt_path last  (and the same options)",
                file=sys.stderr,
            )


class TimedProgressBar(TQDMProgressBar):
    """Lightning's tqdm progress bar, redrawn at most every ``interval`` seconds (and at the end of each loop).

    TQDMProgressBar redraws every ``refresh_rate`` batches, and each redraw also collects the logged metrics:
    about 1 ms on a CPU, as long as two training steps of SimpleNN. No batch count suits every speed (hundreds
    of steps a second here, a few on a big model), so this bar goes by the clock, like tqdm's own mininterval.
    """

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(refresh_rate=1)
        self.interval = interval
        self._next_draw = 0.0

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, int | str | float | dict]:
        metrics = super().get_metrics(trainer, pl_module)
        # The latest logged step loss, converted to a number here, once per redraw (see training_step).
        step_loss = trainer.callback_metrics.get(STEP_LOSS)
        if trainer.training and step_loss is not None:
            metrics[STEP_LOSS] = step_loss.item()
        return metrics

    def _should_update(self, current: int, total: int | float) -> bool:
        now = time.monotonic()
        if not self.is_enabled or (current != total and now < self._next_draw):
            return False
        self._next_draw = now + self.interval
        return True
