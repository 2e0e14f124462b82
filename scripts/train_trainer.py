#!/usr/bin/env python
"""Train SimpleNN on MNIST with Lightning's Trainer running the loop: `python scripts/train_trainer.py`.

The third rung of the ladder: scripts/train_fabric.py with its loop handed to the Trainer (`sdiff` the two), its
steps to the package's LightningModule (Classifier) and its data to its LightningDataModule (MNISTDataModule).
It takes train_fabric.py's flags; scripts/train.py is this with every option. The three rungs end bit-identical.
"""

import json
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from train_fabric import parse_args  # the same flags, checked the same way

from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.lightning_module import Classifier

# Lightning 2.6 calls a torch API that torch >= 2.13 deprecates: a warning at every fit that is not this script's.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


class History(L.Callback):
    """Each epoch's seconds and metrics, for metrics.json: instead of the loop's rows (the progress bar shows them)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_epoch_start(self, trainer: L.Trainer, model: Classifier) -> None:
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, model: Classifier) -> None:  # after validation
        metrics = {name: value.item() for name, value in trainer.callback_metrics.items()}  # waits for the device
        self.rows.append({"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self.start} | metrics)


def main(args) -> None:  # args: train_fabric.parse_args()
    run_dir = Path(args.output_dir or time.strftime("runs/%Y-%m-%d_%H-%M-%S"))
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise ValueError(f"{run_dir} holds an earlier run's files: pass a new --output_dir, or none for a new folder")
    torch.set_float32_matmul_precision(args.float32_matmul_precision)

    # Instead of mnist() and the loaders: MNIST read, normalized, split and served in the same order.
    data = MNISTDataModule(**{name: vars(args)[name] for name in ("data_dir", "batch_size", "val_size", "split_seed")})

    L.seed_everything(args.seed)  # right before the model: the same initial weights on every rung
    # Instead of SimpleNN, the optimizer and the schedule: the LightningModule builds them, and holds the steps.
    hparams = ("optimizer", "lr", "momentum", "weight_decay", "lr_schedule", "compile")
    model = Classifier(data.input_shape, data.num_classes, **{name: vars(args)[name] for name in hparams})
    best = ModelCheckpoint(run_dir / "checkpoints", "best", monitor="val/acc", mode="max")  # instead of best.pt
    last = ModelCheckpoint(run_dir / "checkpoints", "last")  # every epoch: instead of last.pt
    history = History()
    trainer = L.Trainer(  # instead of L.Fabric(...), fabric.launch() and fabric.setup(...)
        **{k: vars(args)[k] for k in ("accelerator", "devices", "num_nodes", "strategy", "precision")},
        max_epochs=args.max_epochs,
        deterministic=args.deterministic,  # instead of torch.use_deterministic_algorithms and CUBLAS_WORKSPACE_CONFIG
        callbacks=[best, last, history],
        logger=False,  # metrics.json is the record, as on the other rungs
        default_root_dir=run_dir,
    )

    start = time.perf_counter()
    try:
        trainer.fit(model, datamodule=data)  # instead of the loop; starts the processes of a multi-device run
        fit_seconds = time.perf_counter() - start
        tested = trainer.test(model, datamodule=data, ckpt_path=best.best_model_path, verbose=False)  # the best epoch
    except SystemExit as stop:  # Lightning's end of a fit or test stopped by Ctrl-C (status 1) or SIGTERM (0)
        raise KeyboardInterrupt(143 if isinstance(stop, SIGTERMException) else 130) from None
    if not trainer.is_global_zero:  # one record and one report per job
        return
    test_loss, test_acc = tested[0]["test/loss"], tested[0]["test/acc"]
    best_val_acc, device = best.best_model_score.item(), trainer.strategy.root_device
    metrics = {**vars(args), "fit_seconds": fit_seconds, "best_val/acc": best_val_acc, "history": history.rows}
    metrics |= {"accelerator": device.type, "test/loss": test_loss, "test/acc": test_acc}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"Test accuracy {100 * test_acc:.2f} % (loss {test_loss:.4f}) on {device}; run folder: {run_dir}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except (ImportError, MisconfigurationException, OSError, RuntimeError, TypeError, ValueError) as error:
        sys.exit(f"Error: {' '.join(str(error).split())}")
    except KeyboardInterrupt as stop:  # a note and the shell's status for the signal (128 + its number)
        print("\nStopped by SIGTERM." if stop.args == (143,) else "\nInterrupted.", file=sys.stderr)
        sys.exit(stop.args[0] if stop.args else 130)
    # Lightning ends a process group of NCCL's (GPUs) at exit, not one of gloo's (CPUs), which can then abort the exit.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
