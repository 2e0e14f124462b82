"""EpochHistory: one row per epoch for metrics.json; SaveOnInterrupt: Ctrl-C or SIGTERM keeps the progress."""

import sys
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn

RECORDED = ("train/loss", "val/loss", "val/acc")


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


class SaveOnInterrupt(Callback):
    """On Ctrl-C or SIGTERM during fit, save last.ckpt and say how to resume from it."""

    def __init__(self, last_checkpoint: Path, output_dir: Path) -> None:
        self.last_checkpoint, self.output_dir = last_checkpoint, output_dir

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning turns SIGTERM into SIGTERMException at the next batch boundary, so the state is consistent.
        if not isinstance(exception, KeyboardInterrupt | SystemExit) or trainer.state.fn != TrainerFn.FITTING:
            return
        trainer.save_checkpoint(self.last_checkpoint, weights_only=False)  # the full state, to resume from
        if trainer.is_global_zero:
            print(
                f"\nInterrupted; progress saved to {self.last_checkpoint}. Resume with:\n"
                f"  python scripts/train.py --output_dir {self.output_dir} --ckpt_path last  (and the same options)",
                file=sys.stderr,
            )
