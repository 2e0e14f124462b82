#!/usr/bin/env python
"""Lightning's fixed cost per training step, and what it is made of, against the plain loop, in one process.

    python benchmarks/step_cost.py --data_dir <MNIST root> --batch_size 64 --repeats 5
    # writes benchmarks/results/step_cost_cpu.json; --accelerator gpu: step_cost_gpu.json

Every configuration trains SimpleNN on MNIST's training batches (the plain and Fabric loops from the rungs' own
DataLoader, the Trainer rows from MNISTDataModule) with the same optimizer and schedule; each is timed over the
training batches of an epoch only (from the epoch's start to the start of its validation), epoch 0 (warm-up) left
out. The Lightning rows add one feature at a time, from a bare Trainer (``training_step`` returns the loss; no
logger, checkpoints, progress bar or summary) up to the template's own Trainer as ``scripts/train.py`` builds it
(``cli.parse_args``, ``runs.open_run``, ``cli.build``), so the difference between neighbouring rows is what a
feature costs per step. Only public Lightning API is used: Trainer arguments, callbacks, loggers.

Configurations take turns (their order reversed every other repeat); each figure is the median over the
repeats, in wall time and in CPU time of the process (all threads). CPU time does not grow while other
processes hold the cores, so on a shared machine it is the steadier of the two; with ``--threads 1`` it is
what the wall time would be on a quiet machine. Output goes to a pseudo-terminal, so progress bars draw as they
would in a shell. ``--calls`` adds the Python function calls per training step of each configuration
(cProfile, main thread: exact counts, unlike times).
"""

import argparse
import cProfile
import fcntl
import functools
import gc
import importlib.util
import os
import pstats
import pty
import shlex
import statistics
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import LearningRateMonitor, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, DistributedSampler

from mnist_lightning.core.callbacks import EpochHistory, ThrottledBar
from mnist_lightning.core.checkpoints import AtomicCheckpointIO, run_checkpoints
from mnist_lightning.core.cli import build, parse_args
from mnist_lightning.core.records import write_json
from mnist_lightning.core.runs import open_run
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.in_memory import Samples
from mnist_lightning.lightning_module import Classifier
from mnist_lightning.model import SimpleNN

RESULTS = Path(__file__).parent / "results"
# The plain and Fabric rungs stand on their own, outside the package: their data function is loaded from the file.
_spec = importlib.util.spec_from_file_location(
    "train_pytorch", Path(__file__).parents[1] / "scripts" / "train_pytorch.py"
)
plain_rung = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_rung)
PLAIN_ROW = "plain PyTorch loop (scripts/train_pytorch.py's, in 32-bit precision)"
Clocks = list[tuple[float, float]]  # (wall, CPU) seconds of each epoch's training batches


class BareStep(Classifier):
    """The loss only: no metric, no ``self.log``."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return F.cross_entropy(self(images), labels, reduction="none").mean()


class LogMetricEveryStep(Classifier):
    """The template's step as it was: the MeanMetric updated and passed to ``self.log`` at every step."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        losses = F.cross_entropy(self(images), labels, reduction="none")
        self.train_loss.update(losses.detach())
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        return losses.mean()


class LogEveryStep(Classifier):
    """The common idiom: the step's loss logged on every step, for the bar, the logger and the epoch mean."""

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss


def clocks() -> tuple[float, float]:
    """Wall time, and the CPU time of this process (all its threads): the second does not grow while other
    processes on a shared machine hold the cores, the first does. On a GPU, after the queued work is done."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    return tuple(now - then for now, then in zip(clocks(), start, strict=True))


class TrainingClock(Callback):
    """(wall, CPU) seconds from each epoch's start to the start of its validation: the training batches only."""

    def __init__(self) -> None:
        self.seconds: list[tuple[float, float]] = []
        self._start = (0.0, 0.0)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = clocks()

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.seconds.append(since(self._start))


# Cumulative: each Trainer row adds one feature to the row above it.
TRAINER_ROWS = [
    ("Trainer: training_step returns the loss; no logger, checkpoints, bar or summary", {}),
    ("+ the template's training_step: MeanMetric.update each step, logged once per epoch", {"module": "template"}),
    ("+ CSVLogger, written every 10 steps", {"logger": True}),
    ("+ LearningRateMonitor, every step", {"lr_monitor": True}),
    ("+ checkpoints: best and last.ckpt (two ModelCheckpoints), atomic writes", {"checkpoints": True}),
    ("+ EpochHistory (the template's callback)", {"history": True}),
    ("+ model summary", {"summary": True}),
    ("+ the template's bar (ThrottledBar: TQDM, redrawn at most every 0.1 s), in a terminal", {"bar": "throttled"}),
]
TEMPLATE_ROWS = [
    "template: the Trainer of scripts/train.py (cli.build), its bar drawn in a terminal",
    "template, --enable_progress_bar false",
]
# Not part of the ladder: what one change to a row above would do.
DIAGNOSTIC_ROWS = [  # (name, the Trainer row changed, or None for the template; the change; NVML check on)
    ("bare Trainer with torch's cached CUDA check, as in a process without Lightning", 0, {}, False),
    (
        "the template's model, but self.log(MeanMetric) at every step (as before)",
        1,
        {"module": "every_step"},
        True,
    ),
    ("the ladder, but Lightning's default TQDMProgressBar (redrawn every batch)", 7, {"bar": "tqdm"}, True),
    ("bare Trainer, batches read with torch's index_select (as before)", 0, {"read": "index_select"}, True),
    ("bare Trainer + 7 callbacks that override no hook (Lightning's cost per callback)", 0, {"idle": 7}, True),
    ("bare Trainer + 14 callbacks that override no hook", 0, {"idle": 14}, True),
    ("template, but self.log(loss, on_step=True, on_epoch=True, prog_bar=True) every step", None, {}, True),
]
MODULES = {"bare": BareStep, "template": Classifier, "every_step": LogMetricEveryStep}
# Lightning's import sets this (lightning/fabric/__init__.py) so that no CUDA check initializes CUDA before a
# fork; torch then asks NVML afresh at every torch.cuda.is_available(), which every Optimizer.step calls.
# A process that never imports Lightning (the plain loop) has torch's cached check.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


@contextmanager
def terminal() -> Iterator[None]:
    """stdout and stderr go to a 120x40 pseudo-terminal (drained and dropped) for the duration."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

    def drain() -> None:
        while True:
            try:
                if not os.read(leader, 1 << 16):
                    return
            except OSError:
                return

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(follower, 1)
    os.dup2(follower, 2)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(follower)
        reader.join(timeout=5)
        os.close(leader)
        os.close(saved[0])
        os.close(saved[1])


def rung_loader(args, fabric: Fabric | None = None) -> DataLoader:
    """The training batches as the plain and Fabric rungs make them (seed 42, validation set 5,000)."""
    train_set = plain_rung.mnist(args.data_dir, 5_000, 0)[0]
    world_size, rank = (fabric.world_size, fabric.global_rank) if fabric else (1, 0)
    sampler = DistributedSampler(train_set, world_size, rank, shuffle=True, seed=42)
    return DataLoader(train_set, args.batch_size, sampler=sampler)


def timed_epochs(train_epoch: Callable[[], object], loader, epochs: int, profile: cProfile.Profile | None) -> Clocks:
    """Run ``train_epoch`` once per epoch and clock each; profile epoch 1 (after the warm-up) if asked."""
    seconds = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        if profile and epoch == 1:
            profile.enable()
        start = clocks()
        train_epoch()
        seconds.append(since(start))
        if profile:
            profile.disable()
    return seconds


def plain_epochs(args, work: Path, profile: cProfile.Profile | None = None) -> Clocks:
    """The loop of scripts/train_pytorch.py at 32-true (without its autocast and scaler, off there), epoch after
    epoch: batches copied to the device by hand."""
    device = torch.device("cuda" if args.accelerator == "gpu" else "cpu")
    loader = rung_loader(args)
    torch.manual_seed(42)
    model = SimpleNN(MNISTDataModule.input_shape, MNISTDataModule.num_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), 0.02)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))

    def train_epoch() -> float:
        model.train()
        loss_sum, count = torch.zeros((), device=device), torch.zeros((), device=device)
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            losses = F.cross_entropy(model(images), labels, reduction="none")
            optimizer.zero_grad()
            losses.mean().backward()
            optimizer.step()
            schedule.step()
            loss_sum += losses.detach().sum()
            count += len(labels)
        return (loss_sum / count).item()

    return timed_epochs(train_epoch, loader, args.epochs, profile)


def fabric_epochs(args, work: Path, profile: cProfile.Profile | None = None) -> Clocks:
    """The loop of scripts/train_fabric.py: Fabric moves the batches and runs the backward pass."""
    fabric = Fabric(accelerator=args.accelerator, devices=1)
    loader = fabric.setup_dataloaders(rung_loader(args, fabric), use_distributed_sampler=False)
    torch.manual_seed(42)
    model = SimpleNN(MNISTDataModule.input_shape, MNISTDataModule.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), 0.02)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    model, optimizer = fabric.setup(model, optimizer)

    def train_epoch() -> float:
        model.train()
        loss_sum, count = torch.zeros((), device=fabric.device), torch.zeros((), device=fabric.device)
        for images, labels in loader:
            losses = F.cross_entropy(model(images), labels, reduction="none")
            optimizer.zero_grad()
            fabric.backward(losses.mean())
            optimizer.step()
            schedule.step()
            loss_sum += losses.detach().sum()
            count += len(labels)
        return (fabric.all_reduce(loss_sum, reduce_op="sum") / fabric.all_reduce(count, reduce_op="sum")).item()

    return timed_epochs(train_epoch, loader, args.epochs, profile)


def trainer_epochs(level: int, args, work: Path, profile: cProfile.Profile | None = None, **change) -> Clocks:
    """The first ``level + 1`` Trainer rows' features together (with ``change`` on top)."""
    features: dict = {"module": "bare"}
    for _, feature in TRAINER_ROWS[: level + 1]:
        features |= feature
    features |= change
    torch.manual_seed(42)
    model = MODULES[features["module"]](MNISTDataModule.input_shape, MNISTDataModule.num_classes)
    clock = ProfiledClock(profile) if profile else TrainingClock()
    callbacks: list[Callback] = [clock]
    if features.get("lr_monitor"):
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    if features.get("history"):
        callbacks += [EpochHistory()]
    if features.get("checkpoints"):  # the best (by the model's monitor, val/acc) and last.ckpt
        callbacks += run_checkpoints(work / "checkpoints", model)
    callbacks += [Callback() for _ in range(features.get("idle", 0))]
    if features.get("bar"):
        callbacks.append(ThrottledBar() if features["bar"] == "throttled" else TQDMProgressBar())
    datamodule = MNISTDataModule(args.data_dir, batch_size=args.batch_size)
    if features.get("read") == "index_select":
        datamodule.setup = functools.partial(setup_reading_with_index_select, datamodule.setup, datamodule)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=1,
        max_epochs=args.epochs,
        default_root_dir=work,
        logger=CSVLogger(work, "logs") if features.get("logger") else False,  # as the template's: logs/version_0
        log_every_n_steps=10,
        callbacks=callbacks,
        enable_checkpointing=bool(features.get("checkpoints")),
        plugins=[AtomicCheckpointIO()] if features.get("checkpoints") else None,
        enable_progress_bar=bool(features.get("bar")),
        enable_model_summary=bool(features.get("summary")),
    )
    trainer.fit(model, datamodule=datamodule)
    return clock.seconds


class IndexSelectSamples(Samples):
    """Samples as they read a batch before: torch's index_select, a parallel region of torch's thread pool."""

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.tensor(indices)
        return tuple(tensor.index_select(0, index) for tensor in self.tensors)


def setup_reading_with_index_select(setup: Callable, datamodule: MNISTDataModule, stage: str | None = None) -> None:
    setup(stage)
    datamodule.datasets = {name: IndexSelectSamples(*data.tensors) for name, data in datamodule.datasets.items()}


def template_epochs(variant: int, args, work: Path, profile: cProfile.Profile | None = None) -> Clocks:
    """The Trainer, model and data module exactly as scripts/train.py builds them: as they are (variant 0),
    without progress bar (1), or with the model's loss logged on every step (2)."""
    flags = ["--data.data_dir", args.data_dir, "--batch_size", str(args.batch_size), "--max_epochs", str(args.epochs)]
    flags += ["--output_dir", str(work / "run"), "--accelerator", args.accelerator]
    if variant == 1:
        flags += ["--enable_progress_bar", "false"]
    config = parse_args(flags)
    with open_run(config) as run:  # as core.train.run: the run opened, then built
        training = build(config, run)
        clock = ProfiledClock(profile) if profile else TrainingClock()
        training.trainer.callbacks.append(clock)
        model = training.model
        if variant == 2:
            settings = {name: value for name, value in model.hparams.items() if name != "net" and name[0] != "_"}
            model = LogEveryStep(net=lambda shape, classes, net=model.net: net, **settings)
        training.trainer.fit(model, datamodule=training.datamodule)
    return clock.seconds


class ProfiledClock(TrainingClock):
    """TrainingClock that also runs a profiler over the training batches of epoch 1."""

    def __init__(self, profile: cProfile.Profile) -> None:
        super().__init__()
        self.profile = profile

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        if trainer.current_epoch == 1:
            self.profile.enable()

    def on_validation_start(self, trainer, pl_module) -> None:
        self.profile.disable()
        super().on_validation_start(trainer, pl_module)


def configurations() -> dict[str, tuple[Callable, bool]]:
    """Row name: (what runs it, whether Lightning's NVML-based CUDA check is on, as in a Lightning process)."""
    rows: dict[str, tuple[Callable, bool]] = {PLAIN_ROW: (plain_epochs, False)}
    rows["Fabric loop (scripts/train_fabric.py's)"] = (fabric_epochs, True)
    for level, (name, _) in enumerate(TRAINER_ROWS):
        rows[name] = (functools.partial(trainer_epochs, level), True)
    for variant, name in enumerate(TEMPLATE_ROWS):
        rows[name] = (functools.partial(template_epochs, variant), True)
    for name, level, change, nvml in DIAGNOSTIC_ROWS:
        run = template_epochs if level is None else trainer_epochs
        rows[name] = (functools.partial(run, 2 if level is None else level, **change), nvml)
    return rows


def run_row(row: tuple[Callable, bool], args, profile: cProfile.Profile | None = None) -> Clocks:
    run, nvml = row
    os.environ[NVML_CHECK] = "1" if nvml else "0"
    gc.collect()
    with TemporaryDirectory() as tmp, terminal():
        return run(args, Path(tmp), profile=profile)


def calls_per_step(row: tuple[Callable, bool], args, steps: int) -> dict:
    """Python function calls per training step in epoch 1, and the files that make most of them."""
    profile = cProfile.Profile()
    run_row(row, args, profile)
    stats = pstats.Stats(profile)
    total = sum(entry[1] for entry in stats.stats.values())  # (primitive calls, total calls, ...)
    by_file: dict[str, int] = {}
    for (filename, _, _), entry in stats.stats.items():
        marker = "site-packages/"
        name = filename.split(marker, 1)[1] if marker in filename else filename
        by_file[name] = by_file.get(name, 0) + entry[1]
    top = sorted(by_file.items(), key=lambda item: -item[1])[:8]
    return {"calls": total / steps, "top_files": {name: count / steps for name, count in top}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="a folder holding MNIST/raw/ (extracted by a first run)")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="per configuration and repeat; epoch 0 is left out")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", action="store_true", help="also count Python function calls per step")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, one per core)")
    parser.add_argument("--rows", nargs="+", default=None, help="only the rows whose names start so (default: all)")
    parser.add_argument("--output", default=None, help="default: results/step_cost_cpu[_threads<N>].json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    suffix = f"_threads{args.threads}" if args.threads else ""
    args.output = args.output or str(RESULTS / f"step_cost_{args.accelerator}{suffix}.json")
    rows = configurations()
    if args.rows:  # the plain and bare-Trainer rows stay: every ratio is to them
        keep = (PLAIN_ROW, TRAINER_ROWS[0][0])
        rows = {name: row for name, row in rows.items() if name in keep or name.startswith(tuple(args.rows))}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        for name in list(rows) if repeat % 2 == 0 else reversed(list(rows)):
            epochs = run_row(rows[name], args)[1:]  # epoch 0 (warm-up) left out
            runs[name].append(tuple(statistics.median(clock) for clock in zip(*epochs, strict=True)))
    steps = -(-(60_000 - 5_000) // args.batch_size)  # MNIST's training images less the validation set
    plain = [statistics.median(clock) for clock in zip(*runs[PLAIN_ROW], strict=True)]
    bare = [statistics.median(clock) for clock in zip(*runs[TRAINER_ROWS[0][0]], strict=True)]
    table = {}
    for name, values in runs.items():
        walls, cpus = zip(*values, strict=True)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        table[name] = {
            "epoch_seconds": wall,
            "ratio_to_plain": wall / plain[0],
            "ratio_to_bare_trainer": wall / bare[0],
            "step_us": 1e6 * wall / steps,
            "extra_us_per_step": 1e6 * (wall - plain[0]) / steps,
            "cpu_epoch_seconds": cpu,
            "cpu_ratio_to_plain": cpu / plain[1],
            "cpu_ratio_to_bare_trainer": cpu / bare[1],
            "cpu_step_us": 1e6 * cpu / steps,
            "cpu_extra_us_per_step": 1e6 * (cpu - plain[1]) / steps,
            "cpu_per_wall": cpu / wall,  # busy threads on average: 1.0 is one core
            "runs": {"wall": walls, "cpu": cpus},
        }
    if args.calls:
        for name, row in rows.items():
            table[name] |= calls_per_step(row, args, steps)
    result = {
        "command": shlex.join(["python", "benchmarks/step_cost.py", *sys.argv[1:]]),
        "batch_size": args.batch_size,
        "training_steps_per_epoch": steps,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if args.accelerator == "gpu" else "cpu",
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "rows": table,
    }
    write_json(args.output, result)
    print(markdown(result))


def markdown(result: dict) -> str:
    calls = "calls" in next(iter(result["rows"].values()))
    lines = [
        f"batch {result['batch_size']}, {result['training_steps_per_epoch']} training steps per epoch, "
        f"{result['torch_threads']} torch thread(s), median of {result['repeats']} alternated repeats",
        "",
        "| configuration | epoch, training batches (s) | / plain | / bare Trainer | extra µs per step | "
        "CPU µs per step | extra CPU µs per step | CPU / plain | CPU / bare Trainer | CPU / wall |"
        + (" Python calls per step |" if calls else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if calls else ""),
    ]
    for name, row in result["rows"].items():
        lines.append(
            f"| {name} | {row['epoch_seconds']:.3f} | {row['ratio_to_plain']:.2f}x | "
            f"{row['ratio_to_bare_trainer']:.2f}x | {row['extra_us_per_step']:+.0f} | {row['cpu_step_us']:.0f} | "
            f"{row['cpu_extra_us_per_step']:+.0f} | {row['cpu_ratio_to_plain']:.2f}x | "
            f"{row['cpu_ratio_to_bare_trainer']:.2f}x | {row['cpu_per_wall']:.1f} |"
            + (f" {row['calls']:.0f} |" if calls else "")
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
