"""Train SimpleNN on MNIST in plain PyTorch: the "before" rung, with every device detail written by hand.

This is how most PyTorch code is written (compare pytorch/examples, mnist/main.py): a ``torch.device``,
``model.to(device)``, batches copied with ``.to(device)``, ``.item()`` to read a number back, a
``torch.cuda.synchronize()`` before reading a clock, files written by the one process there is. Each line that
Fabric (train_fabric.py) takes over is marked DEVICE; Fabric keeps everything else, the loop included. The
Trainer (train.py) takes over the loop too. With the same seed
and flags, all three train on the same batches in the same order with the same arithmetic, and end with the
same weights: `python scripts/compare.py` runs the three side by side.
"""

import argparse
import os
import random
import sys
import time

import numpy
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchvision import transforms

from .data import DATASETS, DataError, DataSettingError, TensorBatches, download, load, split_indices
from .devices import why_no_cuda  # DEVICE:
from .errors import ArgumentParser, UserError, bounded, run_main, true_or_false
from .model import MATMUL_HELP, SimpleNN, compile_network
from .optim import LARGEST_LR, build_optimizer, build_schedule
from .records import OutputDirError, new_run_dir, run_metrics, write_json


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="train_pytorch.py", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")  # DEVICE:
    # The same flags, names and defaults as scripts/train.py wherever they mean the same thing.
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="mnist")
    parser.add_argument("--output_dir", default=None, help="default: a new folder under runs/")
    parser.add_argument("--seed", type=bounded(int, 0, 2**32 - 1), default=42)
    parser.add_argument("--max_epochs", type=bounded(int, 1), default=12)
    parser.add_argument("--batch_size", type=bounded(int, 1), default=4096)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--lr", type=bounded(float, 0, LARGEST_LR, above=True), default=0.02)
    parser.add_argument("--momentum", type=bounded(float, 0), default=0.9)
    parser.add_argument("--weight_decay", type=bounded(float, 0), default=0.0)
    parser.add_argument("--lr_schedule", choices=["cosine", "constant"], default="cosine")
    parser.add_argument("--val_size", type=bounded(int, 1), default=5_000)
    parser.add_argument("--split_seed", type=bounded(int, 0), default=0)
    parser.add_argument("--pipeline", choices=["tensor", "per_sample"], default="tensor")
    parser.add_argument("--num_workers", type=bounded(int, 0, os.cpu_count()), default=0, help="DataLoader workers")
    parser.add_argument("--deterministic", type=true_or_false, nargs="?", const=True, default=False)
    parser.add_argument("--compile", type=true_or_false, nargs="?", const=True, default=False, help="torch.compile")
    parser.add_argument(
        "--float32_matmul_precision", choices=["highest", "high", "medium"], default="high", help=MATMUL_HELP
    )
    return parser


def choose_device(name: str) -> torch.device:  # DEVICE: picking and checking a device is the script's job
    if name == "auto":  # DEVICE:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")  # DEVICE: the usual one-liner
    try:  # DEVICE:
        device = torch.device(name)  # DEVICE:
    except RuntimeError as error:  # DEVICE:
        raise UserError(f"--device {name} is not a device; use auto, cpu, cuda, cuda:N or mps.") from error  # DEVICE:
    if device.type == "cuda" and not torch.cuda.is_available():  # DEVICE:
        raise UserError(  # DEVICE:
            f"--device {name} asks for a GPU, but none can be used: {why_no_cuda()}. Run on the CPU with "  # DEVICE:
            "--device cpu, or use --device auto to take a GPU whenever one is usable."  # DEVICE:
        )  # DEVICE:
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():  # DEVICE:
        raise UserError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s).")  # DEVICE:
    return device  # DEVICE:


def seed_everything(seed: int, deterministic: bool) -> None:
    # What Lightning's seed_everything and Trainer(deterministic=True) do: seed torch (all devices), numpy,
    # random; then deterministic algorithms only (CUBLAS_WORKSPACE_CONFIG: cuBLAS's condition for that).
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


def build_loaders(args: argparse.Namespace, device: torch.device) -> dict:  # DEVICE:
    """Per split, an iterable of (images, labels) batches, shuffled the same way on every rung."""
    info = DATASETS[args.dataset]
    images, labels = load(args.data_dir, args.dataset, train=True)
    try:
        train_idx, val_idx = split_indices(len(labels), args.val_size, args.split_seed)
    except ValueError as error:  # a --val_size the dataset cannot serve: a usage error
        raise DataSettingError(f"{error}.") from error
    if args.pipeline == "per_sample":  # torchvision's per-image path, through a DataLoader
        transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((info.mean,), (info.std,))])
        train_set = info.torchvision_class(args.data_dir, train=True, transform=transform)
        test_set = info.torchvision_class(args.data_dir, train=False, transform=transform)
        splits = {"train": Subset(train_set, train_idx), "val": Subset(train_set, val_idx), "test": test_set}
        # The order the other rungs use: a permutation seeded with seed + epoch (see data.TensorBatches).
        loaders = {
            name: DataLoader(
                split,
                args.batch_size,
                sampler=DistributedSampler(
                    split,
                    num_replicas=1,  # DEVICE: one process
                    rank=0,  # DEVICE:
                    shuffle=name == "train",
                    seed=args.seed,
                ),
                num_workers=args.num_workers,
            )
            for name, split in splits.items()
        }
        return loaders  # DEVICE: the training loop moves each batch to the device
    test_images, test_labels = load(args.data_dir, args.dataset, train=False)
    splits = {
        "train": (images[train_idx], labels[train_idx]),
        "val": (images[val_idx], labels[val_idx]),
        "test": (test_images, test_labels),
    }
    # The whole dataset (47 MB as uint8) goes to the device once; batches are then sliced there.
    return {
        name: TensorBatches(
            images.to(device),  # DEVICE: a tensor's .to() returns a copy on the device
            labels.to(device),  # DEVICE:
            args.batch_size,
            info.mean,
            info.std,
            shuffle=name == "train",
            seed=args.seed,
            num_replicas=1,  # DEVICE: one process
            rank=0,  # DEVICE:
        )
        for name, (images, labels) in splits.items()
    }


def train_epoch(model, loader, optimizer, schedule, device: torch.device) -> float:  # DEVICE:
    """One pass over the training set; the mean loss per sample."""
    model.train()
    loss_sum = torch.zeros((), device=device)  # DEVICE: summed on the device, read back once per epoch
    count = torch.zeros((), device=device)  # DEVICE:
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)  # DEVICE: a no-op if already there
        losses = F.cross_entropy(model(images), labels, reduction="none")  # per sample, for the epoch mean
        optimizer.zero_grad()
        losses.mean().backward()  # DEVICE: 16-bit mixed precision would scale the loss here
        optimizer.step()
        schedule.step()
        loss_sum += losses.detach().sum()
        count += len(labels)
    return (loss_sum / count).item()  # DEVICE: .item() waits for the device and copies to the host


@torch.no_grad()
def evaluate(model, loader, device: torch.device) -> tuple[float, float]:  # DEVICE:
    """Mean loss and accuracy over a split."""
    model.eval()
    loss_sum = torch.zeros((), device=device)  # DEVICE:
    correct = torch.zeros((), device=device)  # DEVICE:
    count = torch.zeros((), device=device)  # DEVICE:
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)  # DEVICE:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="none").sum()
        correct += (logits.argmax(dim=1) == labels).sum()
        count += len(labels)
    return (loss_sum / count).item(), (correct / count).item()  # DEVICE:


def train(args: argparse.Namespace) -> dict:
    device = choose_device(args.device)  # DEVICE:
    output_dir = new_run_dir(args.output_dir)  # DEVICE: under DDP, each process would choose its own
    seed_everything(args.seed, args.deterministic)
    torch.set_float32_matmul_precision(args.float32_matmul_precision)  # as on every rung
    model = SimpleNN((1, 28, 28), 10)  # built right after seeding: the same initial weights on every rung
    model.to(device)  # DEVICE: unlike a tensor's .to(), a module's .to() moves it in place
    download(args.data_dir, args.dataset)
    start = time.perf_counter()
    loaders = build_loaders(args, device)  # DEVICE:
    optimizer = build_optimizer(model.parameters(), args.optimizer, args.lr, args.momentum, args.weight_decay)
    schedule = build_schedule(optimizer, args.lr_schedule, args.max_epochs * len(loaders["train"]))
    if args.compile:
        compile_network(model)

    checkpoints = output_dir / "checkpoints"
    history, best_val_acc = [], -1.0
    for epoch in range(args.max_epochs):
        epoch_start = time.perf_counter()
        loaders["train"].sampler.set_epoch(epoch)  # a new shuffle each epoch, seeded with seed + epoch
        train_loss = train_epoch(model, loaders["train"], optimizer, schedule, device)  # DEVICE:
        val_loss, val_acc = evaluate(model, loaders["val"], device)  # DEVICE:
        if device.type == "cuda":  # DEVICE:
            torch.cuda.synchronize(device)  # DEVICE: CUDA runs asynchronously; wait before reading the clock
        seconds = time.perf_counter() - epoch_start
        history.append(
            {"epoch": epoch, "seconds": seconds, "train/loss": train_loss, "val/loss": val_loss, "val/acc": val_acc}
        )
        line = f"epoch {epoch}: train/loss {train_loss:.4f}, val/loss {val_loss:.4f}, val/acc {val_acc:.4f}"
        print(f"{line}, {seconds:.2f} s")  # DEVICE: under DDP, every process would print
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}  # DEVICE:
        checkpoints.mkdir(parents=True, exist_ok=True)
        torch.save(state, checkpoints / "last.pt")  # DEVICE:
        if val_acc > best_val_acc:  # the best epoch's weights are the ones tested, as on the other rungs
            best_val_acc = val_acc
            torch.save(state, checkpoints / "best.pt")  # DEVICE:
    fit_seconds = time.perf_counter() - start

    best = torch.load(checkpoints / "best.pt", map_location=device, weights_only=True)  # DEVICE: map_location
    model.load_state_dict(best["model"])  # DEVICE:
    test_loss, test_acc = evaluate(model, loaders["test"], device)  # DEVICE:
    metrics = run_metrics(
        test={"test/acc": test_acc, "test/loss": test_loss},
        device=device,  # DEVICE:
        epochs=args.max_epochs,
        history=history,
        fit_seconds=fit_seconds,
        best_val_acc=best_val_acc,
        best_checkpoint=str(checkpoints / "best.pt"),
        devices=1,  # DEVICE:
        num_nodes=1,  # DEVICE:
        precision="32-true",  # DEVICE:
        batch_size=args.batch_size,
        seed=args.seed,
    )
    write_json(output_dir / "metrics.json", metrics)
    line = f"\nTest accuracy {100 * test_acc:.2f} % (loss {test_loss:.4f})"
    print(f"{line} on {device}; run folder: {output_dir}")  # DEVICE:
    return metrics


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: train(build_parser().parse_args(argv)), (DataError, OutputDirError))


if __name__ == "__main__":
    sys.exit(main())
