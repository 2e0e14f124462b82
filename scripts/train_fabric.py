#!/usr/bin/env python
"""Train SimpleNN on MNIST with Lightning Fabric doing the device work: `python scripts/train_fabric.py`.

The second rung of the ladder: scripts/train_pytorch.py with its device lines handed to Fabric (`sdiff` the two).
Fabric chooses the devices, moves the model and the batches, runs mixed precision, starts and connects the
processes of a multi-device or multi-node run and writes checkpoints from one of them; the loop stays yours.
scripts/train_trainer.py hands the loop to the Trainer too. From the same flags the three end bit-identical.
"""

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchvision.datasets import MNIST

from mnist_lightning.model import SimpleNN


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.error = lambda message: parser.exit(2, f"Error: {message}\n")  # without argparse's usage block
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu, cuda, mps or auto (default: auto)")
    parser.add_argument("--devices", default="1", help="devices per node: a count, or which ones (0,1); -1: all")
    parser.add_argument("--num_nodes", type=int, default=1, help="machines of a multi-node run (torchrun, SLURM)")
    parser.add_argument("--strategy", default="auto", help="auto, ddp, fsdp, ... (Lightning's names)")
    parser.add_argument("--precision", default="32-true", help="32-true, 16-mixed, bf16-mixed, ... (Lightning's)")
    # The options of scripts/train.py, with its names and defaults.
    parser.add_argument("--data_dir", default="data", help="where MNIST is, or is downloaded to")
    parser.add_argument("--output_dir", help="the run folder (default: a new folder under runs/)")
    parser.add_argument("--val_size", type=int, default=5000, help="training images held out for validation")
    parser.add_argument("--split_seed", type=int, default=0, help="seed of the split: the same validation set")
    parser.add_argument("--seed", type=int, default=42, help="seed of the initial weights and the batches' order")
    parser.add_argument("--max_epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--lr", type=float, default=0.02, help="peak learning rate")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
    parser.add_argument("--weight_decay", type=float, default=0.0)
    parser.add_argument("--lr_schedule", choices=["cosine", "constant"], default="cosine")
    on_off = {"choices": ["true", "false"], "nargs": "?", "const": "true", "default": "false"}
    parser.add_argument("--deterministic", **on_off, help="deterministic algorithms only")
    parser.add_argument("--compile", **on_off, help="compile the network with torch.compile")
    parser.add_argument("--float32_matmul_precision", choices=["highest", "high", "medium"], default="high")
    args = parser.parse_args(argv)
    for name in ("max_epochs", "batch_size", "val_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not 0 <= args.seed < 2**32:
        parser.error(f"--seed must be between 0 and 2**32 - 1, got {args.seed}")
    if not 0 < args.lr <= 3.4e37:  # false for NaN too; float32's largest / 10: Adam's first step is lr / 0.1
        parser.error(f"--lr must be above 0 and at most 3.4e37, got {args.lr}")
    args.deterministic, args.compile = args.deterministic == "true", args.compile == "true"
    return args


def mnist(data_dir: str, val_size: int, split_seed: int) -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """The training, validation and test sets, downloaded by torchvision unless they are there."""
    folder = Path(data_dir, "MNIST", "raw")  # where torchvision keeps MNIST's four .gz files
    made = [path for path in (folder, *folder.parents) if not path.exists()]  # the folders a download makes
    sets = []
    for train in (True, False):
        try:
            raw = MNIST(data_dir, train=train, download=True)
        except (OSError, RuntimeError) as error:  # offline, say: no folder is left behind
            if made:
                shutil.rmtree(made[-1])
            raise RuntimeError(
                f"MNIST could not be read from {folder} nor downloaded: put its four .gz files there. {error}"
            ) from None
        # ToTensor and Normalize with MNIST's mean and standard deviation, for all images at once.
        sets.append((raw.data.unsqueeze(1).float().div(255).sub(0.1307).div(0.3081), raw.targets))
    (images, labels), (test_images, test_labels) = sets
    if val_size >= len(labels):
        raise ValueError(f"--val_size must be below {len(labels)}, the number of training images")
    # A split of its own seed: the validation set stays the same whatever --seed is.
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(split_seed))
    train, val, test = order[val_size:], order[:val_size], TensorDataset(test_images, test_labels)
    return TensorDataset(images[train], labels[train]), TensorDataset(images[val], labels[val]), test


@torch.no_grad()
def evaluate(model, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """Mean loss and accuracy over a data set."""
    model.eval()
    loss_sum, correct, count = (torch.zeros((), device=device) for _ in range(3))
    for images, labels in loader:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="none").sum()
        correct += (logits.argmax(dim=1) == labels).sum()
        count += len(labels)
    return (loss_sum / count).item(), (correct / count).item()  # .item() waits for the device


def main(args: argparse.Namespace) -> None:
    fabric = L.Fabric(**{k: vars(args)[k] for k in ("accelerator", "devices", "num_nodes", "strategy", "precision")})
    fabric.launch()  # starts the other processes of a multi-device run, each running this script
    run_dir = Path(args.output_dir or time.strftime("runs/%Y-%m-%d_%H-%M-%S"))
    run_dir = fabric.broadcast(run_dir)  # rank 0's choice, for every process
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise ValueError(f"{run_dir} holds an earlier run's files: pass a new --output_dir, or none for a new folder")
    if args.deterministic:  # on a GPU, cuBLAS needs this workspace setting for deterministic results
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision(args.float32_matmul_precision)

    with fabric.rank_zero_first():  # the first process downloads; the others wait, then read its files
        train_set, val_set, test_set = mnist(args.data_dir, args.val_size, args.split_seed)
    # Each process its share of the training set, in the order of Lightning's sampler (seeded with seed + epoch).
    sampler = DistributedSampler(train_set, fabric.world_size, fabric.global_rank, shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, args.batch_size, sampler=sampler)
    val_loader, test_loader = DataLoader(val_set, args.batch_size), DataLoader(test_set, args.batch_size)
    # Batches arrive on the device, the sampler's epoch set at each pass; every process evaluates all of a set.
    loaders = fabric.setup_dataloaders(train_loader, val_loader, test_loader, use_distributed_sampler=False)
    train_loader, val_loader, test_loader = loaders

    fabric.seed_everything(args.seed)  # right before the model: the same initial weights on every rung
    model = SimpleNN((1, 28, 28), 10)
    if args.compile:  # in place, so the weights keep their names; dynamic: the last batch is shorter
        model.compile(dynamic=True)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), args.lr, weight_decay=args.weight_decay)
    if args.lr_schedule == "cosine":  # stepped after every optimizer step, down to 0 at the end of the run
        steps = max(args.max_epochs * len(train_loader), 1)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    else:
        schedule = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    model, optimizer = fabric.setup(model, optimizer)  # moves the model; wraps it for the precision and DDP

    history, best_val_acc, start = [], -1.0, time.perf_counter()
    for epoch in range(args.max_epochs):
        epoch_start = time.perf_counter()
        model.train()
        loss_sum, count = torch.zeros((), device=fabric.device), torch.zeros((), device=fabric.device)
        for images, labels in train_loader:
            losses = F.cross_entropy(model(images), labels, reduction="none")
            optimizer.zero_grad()
            fabric.backward(losses.mean())  # scales the loss in 16-bit precision; DDP averages the gradients
            optimizer.step()  # Fabric's optimizer: unscales 16-bit gradients first, skips overflowed steps
            schedule.step()
            loss_sum += losses.detach().sum()  # summed on the device: no waiting for it at every step
            count += len(labels)
        train_loss = (fabric.all_reduce(loss_sum, reduce_op="sum") / fabric.all_reduce(count, reduce_op="sum")).item()
        val_loss, val_acc = evaluate(model, val_loader, fabric.device)
        if not math.isfinite(train_loss + val_loss):  # NaN weights would be saved and tested: stop at the cause
            raise ValueError(f"training diverged in epoch {epoch} (loss {train_loss + val_loss}): use a smaller --lr")
        row = {"epoch": epoch, "seconds": time.perf_counter() - epoch_start, "train/loss": train_loss}
        history.append(row | {"val/loss": val_loss, "val/acc": val_acc})
        fabric.print(f"epoch {epoch}: train/loss {train_loss:.4f}, val/loss {val_loss:.4f}, val/acc {val_acc:.4f}")
        state = {"model": model, "optimizer": optimizer, "epoch": epoch}  # fabric.save takes their state_dicts
        fabric.save(run_dir / "checkpoints" / "last.pt", state)  # written by one process
        if val_acc > best_val_acc:  # the epoch that did best on validation is the one tested, as on every rung
            best_val_acc = val_acc
            fabric.save(run_dir / "checkpoints" / "best.pt", state)
    fit_seconds = time.perf_counter() - start

    fabric.load(run_dir / "checkpoints" / "best.pt", {"model": model})
    test_loss, test_acc = evaluate(model, test_loader, fabric.device)
    if not fabric.is_global_zero:  # one record and one report per job
        return
    metrics = {**vars(args), "fit_seconds": fit_seconds, "best_val/acc": best_val_acc, "history": history}
    metrics |= {"accelerator": fabric.device.type, "test/loss": test_loss, "test/acc": test_acc}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"Test accuracy {100 * test_acc:.2f} % (loss {test_loss:.4f}) on {fabric.device}; run folder: {run_dir}")


if __name__ == "__main__":
    try:
        main(parse_args())
    except (ImportError, OSError, RuntimeError, TypeError, ValueError) as error:  # a setting that cannot work
        sys.exit(f"Error: {' '.join(str(error).split())}")
    except KeyboardInterrupt:  # Ctrl-C: a note and the shell's status for it (128 + SIGINT), without a traceback
        print("\nInterrupted.", file=sys.stderr)
        sys.exit(130)
    # Lightning ends a process group of NCCL's (GPUs) at exit, not one of gloo's (CPUs), which can then abort the exit.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
