"""The plain-PyTorch reference: the template's model, data, split and defaults, with devices handled by hand.

This is the "before" picture. Every line marked DEVICE is one that the Lightning version does not need,
because its Trainer places the model and the batches. Results match the Lightning run: same
initialization (same seed), same batches in the same order, same arithmetic.
"""

import argparse
import copy
import os
import sys
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Subset
from torchvision import transforms
from torchvision.datasets import MNIST

from .data import DATASETS, DataError, download, load, normalize, split_indices
from .devices import why_no_cuda
from .errors import UserError, run_main
from .model import SimpleNN
from .records import OutputDirError, new_run_dir, peak_memory_mb, write_json

Batches = Iterator[tuple[Tensor, Tensor]]  # (images, labels) on the device


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train_pytorch.py", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--output_dir", default=None, help="default: a new folder under runs/")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max_epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight_decay", type=float, default=0.0)
    parser.add_argument("--lr_schedule", choices=["cosine", "constant"], default="cosine")
    parser.add_argument("--val_size", type=int, default=5_000)
    parser.add_argument("--split_seed", type=int, default=0)
    parser.add_argument("--mean", type=float, default=DATASETS["mnist"].mean)
    parser.add_argument("--std", type=float, default=DATASETS["mnist"].std)
    parser.add_argument(
        "--pipeline",
        choices=["tensor", "per_sample"],
        default="tensor",
        help="tensor: batches sliced from tensors on the device (the template's path); per_sample: "
        "torchvision's per-image PIL -> ToTensor -> Normalize through a DataLoader, to see what it costs",
    )
    parser.add_argument("--num_workers", type=int, default=0, help="DataLoader workers (per_sample only)")
    parser.add_argument("--deterministic", action="store_true", help="deterministic algorithms only")
    return parser


def choose_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")  # DEVICE: the usual one-liner
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise UserError(f"--device {name} is not a device name; use auto, cpu, cuda, cuda:N or mps.") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name} asks for a GPU, but none can be used: {why_no_cuda()}. Use --device cpu.")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UserError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s).")
    return device


def load_data(args: argparse.Namespace, device: torch.device) -> dict:
    """Per split: uint8 tensors on the device (tensor pipeline) or torchvision datasets (per_sample)."""
    images, labels = load(args.data_dir, train=True)
    train_idx, val_idx = split_indices(len(labels), args.val_size, args.split_seed)
    if args.pipeline == "per_sample":
        to_tensor = transforms.Compose([transforms.ToTensor(), transforms.Normalize((args.mean,), (args.std,))])
        train_set = MNIST(args.data_dir, train=True, transform=to_tensor)
        test_set = MNIST(args.data_dir, train=False, transform=to_tensor)
        return {"train": Subset(train_set, train_idx), "val": Subset(train_set, val_idx), "test": test_set}
    test_images, test_labels = load(args.data_dir, train=False)
    # DEVICE: the whole dataset (47 MB as uint8) moves to the device once; a tensor's .to() returns a copy.
    return {
        "train": (images[train_idx].to(device), labels[train_idx].to(device)),
        "val": (images[val_idx].to(device), labels[val_idx].to(device)),
        "test": (test_images.to(device), test_labels.to(device)),
    }


def batches(data, args: argparse.Namespace, device: torch.device, epoch: int | None = None) -> Batches:
    """One pass over a split: shuffled for a training ``epoch``, in order when ``epoch`` is None."""
    if args.pipeline == "per_sample":
        generator = torch.Generator().manual_seed(args.seed + (epoch or 0))
        loader = DataLoader(
            data, args.batch_size, shuffle=epoch is not None, num_workers=args.num_workers, generator=generator
        )
        for images, labels in loader:
            yield images.to(device), labels.to(device)  # DEVICE: copy every batch to the device
        return
    images, labels = data
    if epoch is None:
        order = torch.arange(len(labels))
    else:  # the order Lightning's DistributedSampler makes: randperm seeded with seed + epoch
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(args.seed + epoch))
    for idx in order.to(device).split(args.batch_size):
        yield normalize(images.index_select(0, idx), args.mean, args.std), labels.index_select(0, idx)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Batches) -> tuple[float, float]:
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for images, labels in batches:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()  # .item() syncs and copies to host
        # DEVICE: .numpy() works only on CPU tensors, hence .cpu() first.
        correct += int((logits.argmax(dim=1).cpu().numpy() == labels.cpu().numpy()).sum())
        count += len(labels)
    return loss_sum / count, correct / count


def train_plain(args: argparse.Namespace) -> dict:
    device = choose_device(args.device)
    output_dir = new_run_dir(args.output_dir)
    torch.manual_seed(args.seed)
    if args.deterministic:  # what Lightning's Trainer(deterministic=True) sets
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    download(args.data_dir)
    start = time.perf_counter()
    data = load_data(args, device)
    train_size = len(data["train"]) if args.pipeline == "per_sample" else len(data["train"][1])

    model = SimpleNN().to(device)  # DEVICE: unlike a tensor's .to(), a module's .to() moves it in place
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), args.lr, weight_decay=args.weight_decay)
    steps = args.max_epochs * -(-train_size // args.batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)

    history, best_val_acc, best_state = [], -1.0, None
    for epoch in range(args.max_epochs):
        epoch_start = time.perf_counter()
        model.train()
        loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync per step
        for images, labels in batches(data["train"], args, device, epoch):
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.lr_schedule == "cosine":
                schedule.step()
            loss_sum += loss.detach() * len(labels)
        val_loss, val_acc = evaluate(model, batches(data["val"], args, device))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # DEVICE: CUDA runs asynchronously; wait before reading the clock
        seconds = time.perf_counter() - epoch_start
        train_loss = loss_sum.item() / train_size
        history.append(
            {"epoch": epoch, "seconds": seconds, "train/loss": train_loss, "val/loss": val_loss, "val/acc": val_acc}
        )
        print(f"epoch {epoch} train/loss {train_loss:.4f} val/loss {val_loss:.4f} val/acc {val_acc:.4f} {seconds:.1f}s")
        if val_acc > best_val_acc:  # keep the best epoch's weights, as the Lightning run's checkpoint does
            best_val_acc, best_state = val_acc, copy.deepcopy(model.state_dict())
    fit_seconds = time.perf_counter() - start

    model.load_state_dict(best_state)
    test_loss, test_acc = evaluate(model, batches(data["test"], args, device))
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.save(best_state, output_dir / "model.pt")
    metrics = {
        "test/acc": test_acc,
        "test/loss": test_loss,
        "best_val/acc": best_val_acc,
        "epochs": args.max_epochs,
        "fit_seconds": fit_seconds,
        "accelerator": device.type,
        "devices": 1,
        "num_nodes": 1,
        "precision": "32-true",
        "batch_size": args.batch_size,
        "seed": args.seed,
        "best_checkpoint": str(output_dir / "model.pt"),
        **peak_memory_mb(device),
        "history": history,
    }
    write_json(output_dir / "metrics.json", metrics)
    print(f"\nTest accuracy {100 * test_acc:.2f} % (loss {test_loss:.4f}) on {device}; results in {output_dir}")
    return metrics


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: train_plain(build_parser().parse_args(argv)), (DataError, OutputDirError))


if __name__ == "__main__":
    sys.exit(main())
