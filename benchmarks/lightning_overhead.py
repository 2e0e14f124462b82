#!/usr/bin/env python
"""What Lightning costs per step, feature by feature, against the plain loop, in one process.

    python benchmarks/lightning_overhead.py --data_dir data --batch_size 64 --repeats 3

Each row adds one feature to the row above it, so the differences between rows are what each feature costs.
All rows train the same model on the same device-resident batches; epoch 0 (warm-up) is left out; each row's
figure is its best repeat (interference on a shared machine only ever adds time).
"""

import argparse
import contextlib
import io
import logging
import os
import statistics
import warnings
from pathlib import Path
from tempfile import TemporaryDirectory

import torch.nn.functional as F
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from mnist_lightning.profiler import NoOpProfiler

from mnist_lightning import plain_pytorch
from mnist_lightning.callbacks import EpochHistory, LastCheckpoint, TimedProgressBar
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.lightning_module import MNISTClassifier


class BareStep(MNISTClassifier):
    """Only the loss: no metric update, no logging."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return F.cross_entropy(self(images), labels)


class EpochLossOnly(MNISTClassifier):
    """The epoch-mean loss (a torchmetrics MeanMetric), without the per-step logging of the template."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.train_loss.update(loss.detach().expand(len(labels)))
        if batch_idx == 0:
            self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        return loss


class LogEveryStep(MNISTClassifier):
    """What most templates do: self.log on every step, for the step value and the epoch mean."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss


FEATURES = [
    "Lightning, bare training_step",
    "+ NoOpProfiler instead of Lightning's PassThroughProfiler",
    "+ epoch loss (MeanMetric)",
    "+ step loss logged every 10 steps (template module)",
    "+ model summary",
    "+ checkpoints (best + last.ckpt)",
    "+ CSVLogger",
    "+ progress bar redrawn every 0.2 s (= template defaults)",
    "template defaults, but progress bar redrawn every 10 batches",
    "template defaults, but self.log on every step",
    "template defaults, but Lightning's per-call NVML CUDA check",
]


def lightning_epoch(level: int, args, work: Path) -> float:
    module = {0: BareStep, 1: BareStep, 2: EpochLossOnly, 9: LogEveryStep}.get(level, MNISTClassifier)
    history = EpochHistory()
    callbacks = [history]
    if level >= 5:
        best = ModelCheckpoint(dirpath=work / "checkpoints", monitor="val/acc", mode="max")
        callbacks += [best, LastCheckpoint(work)]
    if level >= 7:
        callbacks.append(TQDMProgressBar(refresh_rate=10) if level == 8 else TimedProgressBar())
    seed_everything(42, verbose=False)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.max_epochs,
        log_every_n_steps=10,
        callbacks=callbacks,
        enable_model_summary=level >= 4,
        enable_checkpointing=level >= 5,
        logger=CSVLogger(work, name="", version="") if level >= 6 else False,
        enable_progress_bar=level >= 7,
        num_sanity_val_steps=0,
        profiler=None if level == 0 else NoOpProfiler(),
    )
    # Lightning sets this on import; the template turns it off for runs that do not use a GPU (devices.py).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1" if level == 10 else "0"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(module(), datamodule=MNISTDataModule(args.data_dir, batch_size=args.batch_size))
    return statistics.median(row["seconds"] for row in history.rows[1:])


def plain_epoch(args, work: Path) -> float:
    flags = ["--data_dir", args.data_dir, "--device", "cpu", "--batch_size", str(args.batch_size)]
    flags += ["--max_epochs", str(args.max_epochs), "--output_dir", str(work / "plain")]
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "0"  # as in a process that never imports Lightning
    with contextlib.redirect_stdout(io.StringIO()):
        metrics = plain_pytorch.train_plain(plain_pytorch.build_parser().parse_args(flags))
    return statistics.median(row["seconds"] for row in metrics["history"][1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    times: dict[str, list[float]] = {"plain PyTorch loop": []} | {name: [] for name in FEATURES}
    for _ in range(args.repeats):
        with TemporaryDirectory() as tmp:
            times["plain PyTorch loop"].append(plain_epoch(args, Path(tmp)))
        for level, name in enumerate(FEATURES):
            with TemporaryDirectory() as tmp:
                times[name].append(lightning_epoch(level, args, Path(tmp)))
    plain = min(times["plain PyTorch loop"])
    steps = -(-55_000 // args.batch_size) + -(-5_000 // args.batch_size)
    print(f"batch {args.batch_size}, {steps} steps per epoch (training and validation), best of {args.repeats}\n")
    print("| configuration | epoch (s) | / plain | extra per step (ms) |\n|---|---|---|---|")
    for name, seconds in times.items():
        best = min(seconds)
        print(f"| {name} | {best:.3f} | {best / plain:.2f}x | {1000 * (best - plain) / steps:.2f} |")


if __name__ == "__main__":
    main()
