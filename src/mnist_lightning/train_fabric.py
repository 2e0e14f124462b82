"""Train SimpleNN on MNIST with Lightning Fabric: the middle rung, the plain loop with Fabric doing the device work.

This is plain_pytorch.py with its device lines (marked DEVICE there) replaced by Fabric's (marked FABRIC
here); `diff src/mnist_lightning/plain_pytorch.py src/mnist_lightning/train_fabric.py` shows nothing else.
The loop, the data, the optimizer and the arithmetic stay the user's own. Fabric chooses and sets up the
device (``Fabric(accelerator, devices, precision, strategy)``), moves the model (``fabric.setup``), runs
the backward pass (``fabric.backward``: loss scaling in 16-bit mixed precision), starts and connects the
processes of a multi-GPU or multi-node run (``fabric.launch``), sums metrics over them (``fabric.all_reduce``)
and writes checkpoints from one process (``fabric.save``/``fabric.load``).
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path  # FABRIC:

import lightning as L  # FABRIC:
import numpy
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchvision import transforms

from .data import DATASETS, DataError, DataSettingError, TensorBatches, download, load, split_indices
from .devices import check_accelerator, device_flags_hint, missing_package  # FABRIC:
from .errors import ArgumentParser, UserError, bounded, run_main, true_or_false
from .model import MATMUL_HELP, SimpleNN, compile_network
from .optim import LARGEST_LR, build_optimizer, build_schedule
from .records import OutputDirError, new_run_dir, run_metrics, write_json

RUN_DIR_VARIABLE = "MNIST_LIGHTNING_RUN_DIR"  # FABRIC: rank 0's choice of run folder, for the processes launched


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="train_fabric.py", description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu, cuda, mps or auto")  # FABRIC:
    parser.add_argument("--devices", default="1", help="a count, a list like [0,1], -1 or auto")  # FABRIC:
    parser.add_argument("--num_nodes", type=int, default=1)  # FABRIC:
    parser.add_argument("--strategy", default="auto", help="auto, ddp, ... (Lightning's names)")  # FABRIC:
    parser.add_argument("--precision", default="32-true", help="32-true, 16-mixed, bf16-mixed, ...")  # FABRIC:
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


def build_fabric(args: argparse.Namespace) -> L.Fabric:  # FABRIC: Fabric picks, checks and sets up the device
    check_accelerator(args.accelerator, args.devices)  # FABRIC: a clear message when no GPU can be used
    devices = args.devices if args.devices in ("auto", "-1") or "," in args.devices else int(args.devices)  # FABRIC:
    try:  # FABRIC:
        return L.Fabric(  # FABRIC:
            accelerator=args.accelerator,  # FABRIC:
            devices=devices,  # FABRIC:
            num_nodes=args.num_nodes,  # FABRIC:
            strategy=args.strategy,  # FABRIC:
            precision=args.precision,  # FABRIC:
        )  # FABRIC:
    except (ValueError, TypeError, RuntimeError) as error:  # FABRIC: Lightning's messages list the valid values
        hint = device_flags_hint(str(error)) or "Run scripts/train_fabric.py --help for every option."  # FABRIC:
        raise UserError(f"The Fabric settings are not valid: {str(error).rstrip('.')}. {hint}") from error  # FABRIC:
    except ImportError as error:  # FABRIC: an accelerator, strategy or precision whose package is missing
        raise UserError(missing_package(error)) from error  # FABRIC:


def choose_run_dir(output_dir: str | None) -> Path:  # FABRIC: every process must write into one run folder
    """Rank 0 chooses, and passes its choice on to the processes that fabric.launch() starts."""  # FABRIC:
    if L.fabric.utilities.rank_zero_only.rank > 0:  # FABRIC: started by fabric.launch, torchrun or srun
        shared = output_dir or os.environ.get(RUN_DIR_VARIABLE)  # FABRIC:
        if not shared:  # FABRIC:
            raise UserError("Processes started by torchrun or srun must all get the same --output_dir.")  # FABRIC:
        return Path(shared)  # FABRIC:
    run_dir = new_run_dir(output_dir)  # FABRIC:
    os.environ[RUN_DIR_VARIABLE] = str(run_dir.resolve())  # FABRIC: inherited by the processes launched
    return run_dir  # FABRIC:


def seed_everything(seed: int, deterministic: bool) -> None:
    # What Lightning's seed_everything and Trainer(deterministic=True) do: seed torch (all devices), numpy,
    # random; then deterministic algorithms only (CUBLAS_WORKSPACE_CONFIG: cuBLAS's condition for that).
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


def build_loaders(args: argparse.Namespace, fabric: L.Fabric) -> dict:  # FABRIC:
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
                    num_replicas=fabric.world_size,  # FABRIC: each process its own share of the data
                    rank=fabric.global_rank,  # FABRIC:
                    shuffle=name == "train",
                    seed=args.seed,
                ),
                num_workers=args.num_workers,
            )
            for name, split in splits.items()
        }
        # FABRIC: batches then arrive on the device; the samplers above already shard the data, so they stay.
        wrapped = fabric.setup_dataloaders(*loaders.values(), use_distributed_sampler=False)  # FABRIC:
        return dict(zip(loaders, wrapped, strict=True))  # FABRIC:
    test_images, test_labels = load(args.data_dir, args.dataset, train=False)
    splits = {
        "train": (images[train_idx], labels[train_idx]),
        "val": (images[val_idx], labels[val_idx]),
        "test": (test_images, test_labels),
    }
    # The whole dataset (47 MB as uint8) goes to the device once; batches are then sliced there.
    return {
        name: TensorBatches(
            fabric.to_device(images),  # FABRIC: the device Fabric chose for this process
            fabric.to_device(labels),  # FABRIC:
            args.batch_size,
            info.mean,
            info.std,
            shuffle=name == "train",
            seed=args.seed,
            num_replicas=fabric.world_size,  # FABRIC: each process its own share of the data
            rank=fabric.global_rank,  # FABRIC:
        )
        for name, (images, labels) in splits.items()
    }


def train_epoch(model, loader, optimizer, schedule, fabric: L.Fabric) -> float:  # FABRIC:
    """One pass over the training set; the mean loss per sample."""
    model.train()
    loss_sum = torch.zeros((), device=fabric.device)  # FABRIC: summed on the device, read back once per epoch
    count = torch.zeros((), device=fabric.device)  # FABRIC:
    for images, labels in loader:
        losses = F.cross_entropy(model(images), labels, reduction="none")  # per sample, for the epoch mean
        optimizer.zero_grad()
        fabric.backward(losses.mean())  # FABRIC: scales the loss in 16-bit mixed precision; DDP syncs
        optimizer.step()
        schedule.step()
        loss_sum += losses.detach().sum()
        count += len(labels)
    loss_sum = fabric.all_reduce(loss_sum, reduce_op="sum")  # FABRIC: summed over the processes
    count = fabric.all_reduce(count, reduce_op="sum")  # FABRIC:
    return (loss_sum / count).item()  # FABRIC:


@torch.no_grad()
def evaluate(model, loader, fabric: L.Fabric) -> tuple[float, float]:  # FABRIC:
    """Mean loss and accuracy over a split."""
    model.eval()
    loss_sum = torch.zeros((), device=fabric.device)  # FABRIC:
    correct = torch.zeros((), device=fabric.device)  # FABRIC:
    count = torch.zeros((), device=fabric.device)  # FABRIC:
    for images, labels in loader:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="none").sum()
        correct += (logits.argmax(dim=1) == labels).sum()
        count += len(labels)
    loss_sum = fabric.all_reduce(loss_sum, reduce_op="sum")  # FABRIC: summed over the processes
    correct = fabric.all_reduce(correct, reduce_op="sum")  # FABRIC:
    count = fabric.all_reduce(count, reduce_op="sum")  # FABRIC:
    return (loss_sum / count).item(), (correct / count).item()  # FABRIC:


def train(args: argparse.Namespace) -> dict:
    fabric = build_fabric(args)  # FABRIC:
    output_dir = choose_run_dir(args.output_dir)  # FABRIC:
    fabric.launch()  # FABRIC: starts the other processes of a multi-device run (each runs this script)
    seed_everything(args.seed, args.deterministic)
    torch.set_float32_matmul_precision(args.float32_matmul_precision)  # as on every rung
    model = SimpleNN((1, 28, 28), 10)  # built right after seeding: the same initial weights on every rung
    download(args.data_dir, args.dataset)
    start = time.perf_counter()
    loaders = build_loaders(args, fabric)  # FABRIC:
    optimizer = build_optimizer(model.parameters(), args.optimizer, args.lr, args.momentum, args.weight_decay)
    schedule = build_schedule(optimizer, args.lr_schedule, args.max_epochs * len(loaders["train"]))
    if args.compile:
        compile_network(model)
    model, optimizer = fabric.setup(model, optimizer)  # FABRIC: moves the model; wraps it for DDP and precision

    checkpoints = output_dir / "checkpoints"
    history, best_val_acc = [], -1.0
    for epoch in range(args.max_epochs):
        epoch_start = time.perf_counter()
        loaders["train"].sampler.set_epoch(epoch)  # a new shuffle each epoch, seeded with seed + epoch
        train_loss = train_epoch(model, loaders["train"], optimizer, schedule, fabric)  # FABRIC:
        val_loss, val_acc = evaluate(model, loaders["val"], fabric)  # FABRIC:
        if fabric.device.type == "cuda":  # FABRIC: Fabric leaves timing to you, like plain PyTorch
            torch.cuda.synchronize(fabric.device)  # FABRIC:
        seconds = time.perf_counter() - epoch_start
        history.append(
            {"epoch": epoch, "seconds": seconds, "train/loss": train_loss, "val/loss": val_loss, "val/acc": val_acc}
        )
        line = f"epoch {epoch}: train/loss {train_loss:.4f}, val/loss {val_loss:.4f}, val/acc {val_acc:.4f}"
        if fabric.is_global_zero:  # FABRIC: once per job (fabric.print prints once per machine)
            print(f"{line}, {seconds:.2f} s")  # FABRIC:
        state = {"model": model, "optimizer": optimizer, "epoch": epoch}  # FABRIC: fabric.save calls state_dict()
        checkpoints.mkdir(parents=True, exist_ok=True)
        fabric.save(checkpoints / "last.pt", state)  # FABRIC: written once, by rank 0
        if val_acc > best_val_acc:  # the best epoch's weights are the ones tested, as on the other rungs
            best_val_acc = val_acc
            fabric.save(checkpoints / "best.pt", state)  # FABRIC:
    fit_seconds = time.perf_counter() - start

    fabric.load(checkpoints / "best.pt", {"model": model})  # FABRIC: onto this process's device, in place
    test_loss, test_acc = evaluate(model, loaders["test"], fabric)  # FABRIC:
    metrics = run_metrics(
        test={"test/acc": test_acc, "test/loss": test_loss},
        device=fabric.device,  # FABRIC:
        epochs=args.max_epochs,
        history=history,
        fit_seconds=fit_seconds,
        best_val_acc=best_val_acc,
        best_checkpoint=str(checkpoints / "best.pt"),
        devices=fabric.world_size // args.num_nodes,  # FABRIC:
        num_nodes=args.num_nodes,  # FABRIC:
        precision=fabric.strategy.precision.precision,  # FABRIC: e.g. "32" is recorded as "32-true"
        batch_size=args.batch_size,
        seed=args.seed,
    )
    if fabric.is_global_zero:  # FABRIC: one record, from rank 0
        write_json(output_dir / "metrics.json", metrics)
    line = f"\nTest accuracy {100 * test_acc:.2f} % (loss {test_loss:.4f})"
    if fabric.is_global_zero:  # FABRIC:
        print(f"{line} on {fabric.device}; run folder: {output_dir}")  # FABRIC:
    return metrics


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: train(build_parser().parse_args(argv)), (DataError, OutputDirError))


if __name__ == "__main__":
    sys.exit(main())
