#!/usr/bin/env python
"""Measure the figures in benchmarks/README.md on this machine, every run a fresh process.

    python benchmarks/run.py --data_dir data --accelerator cpu          # writes benchmarks/results/cpu.json

1. Data path: the best plain-loop epoch at batch 64 through torchvision's per-image pipeline (0 and 2 workers)
   and through the template's tensor pipeline; the ratio is per-sample time over tensor time.
2. Lightning vs plain at the template's defaults and at batch 64 (scripts/compare.py, alternated repeats).
3. Wall clock of a default `python scripts/train.py`, imports included, and its test accuracy.
"""

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

from mnist_lightning.compare import build_parser as compare_parser
from mnist_lightning.compare import compare, run_side
from mnist_lightning.records import write_json

RESULTS = Path(__file__).parent / "results"


def data_path(args, work: Path) -> dict:
    device = "cuda" if args.accelerator == "gpu" else "cpu"
    flags = ["--data_dir", args.data_dir, "--batch_size", "64", "--device", device]
    cases = {
        "per_sample, 0 workers": ["--pipeline", "per_sample", "--max_epochs", "1"],
        "per_sample, 2 workers": ["--pipeline", "per_sample", "--num_workers", "2", "--max_epochs", "1"],
        "tensor": ["--pipeline", "tensor", "--max_epochs", "3"],
    }
    seconds = {}
    for name, extra in cases.items():
        # Best epoch of several runs; the per-sample path (one long epoch per run) is run twice.
        runs = args.repeats if name == "tensor" else min(2, args.repeats)
        folders = [work / f"{name.replace(', ', '_').replace(' ', '')}_{i}" for i in range(runs)]
        histories = [run_side("plain", flags + extra, folder)["history"] for folder in folders]
        seconds[name] = min(row["seconds"] for history in histories for row in history[-2:])
    return {"epoch_seconds": seconds, "speedup": seconds["per_sample, 0 workers"] / seconds["tensor"]}


def lightning_vs_plain(args, work: Path, *flags: str) -> dict:
    settings = ["--data_dir", args.data_dir, "--accelerator", args.accelerator, "--repeats", str(args.repeats)]
    result = compare(compare_parser().parse_args([*settings, *flags, "--output_dir", str(work)]))
    return {
        "lightning_epoch_seconds": result["lightning"]["epoch_seconds"],
        "plain_epoch_seconds": result["plain"]["epoch_seconds"],
        "ratio": result["epoch_time_ratio"],
        "max_train_loss_difference": result["max_train_loss_difference"],
        "lightning_test_acc": result["lightning"]["test/acc"],
        "plain_test_acc": result["plain"]["test/acc"],
        "peak_host_mb": {side: result[side]["peak_host_mb"] for side in ("lightning", "plain")},
        "peak_gpu_mb": {side: result[side]["peak_gpu_mb"] for side in ("lightning", "plain")},
    }


def default_train(args, work: Path) -> dict:
    runs = []
    for repeat in range(args.repeats):
        output_dir = work / f"train_{repeat}"
        command = [sys.executable, "scripts/train.py", "--data_dir", args.data_dir, "--output_dir", str(output_dir)]
        if args.accelerator == "gpu":
            command += ["--accelerator", "gpu", "--devices", "1"]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        metrics = json.loads((output_dir / "metrics.json").read_text())
        runs.append({"wall_seconds": time.perf_counter() - start, "test/acc": metrics["test/acc"]})
    best = min(runs, key=lambda run: run["wall_seconds"])
    return {"wall_seconds": best["wall_seconds"], "test/acc": best["test/acc"], "runs": runs}


def ratio(side_by_side: dict) -> str:
    lightning, plain = side_by_side["lightning_epoch_seconds"], side_by_side["plain_epoch_seconds"]
    return f"{side_by_side['ratio']:.2f}x ({lightning:.3f} s / {plain:.3f} s)"


def markdown(results: dict) -> str:
    """The table for benchmarks/README.md, straight from the measured results."""
    data, defaults, b64, train = (results[k] for k in ("data_path_batch64", "defaults", "batch64", "default_train"))
    seconds = data["epoch_seconds"]
    rows = [
        (
            "epoch, plain loop, batch 64: torchvision per-sample pipeline, 0 workers",
            f"{seconds['per_sample, 0 workers']:.2f} s",
        ),
        (
            "epoch, plain loop, batch 64: torchvision per-sample pipeline, 2 workers",
            f"{seconds['per_sample, 2 workers']:.2f} s",
        ),
        ("epoch, plain loop, batch 64: tensor pipeline (this template)", f"{seconds['tensor']:.2f} s"),
        ("data path speed-up (per-sample, 0 workers / tensor)", f"{data['speedup']:.1f}x"),
        ("Lightning / plain epoch time, defaults", ratio(defaults)),
        ("Lightning / plain epoch time, batch 64", ratio(b64)),
        (
            "largest per-epoch train/loss difference, Lightning vs plain (defaults / batch 64)",
            f"{defaults['max_train_loss_difference']:.1e} / {b64['max_train_loss_difference']:.1e}",
        ),
        (
            "peak host memory, Lightning / plain (defaults)",
            f"{defaults['peak_host_mb']['lightning']:.0f} / {defaults['peak_host_mb']['plain']:.0f} MB",
        ),
        (
            "default `python scripts/train.py`: wall clock with imports, test accuracy",
            f"{train['wall_seconds']:.1f} s, {100 * train['test/acc']:.2f} %",
        ),
    ]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = {
            "machine": {
                "platform": platform.platform(),
                "cpus": torch.get_num_threads(),
                "gpu": torch.cuda.get_device_name() if args.accelerator == "gpu" else None,
                "torch": torch.__version__,
            },
            "data_path_batch64": data_path(args, work / "data"),
            "defaults": lightning_vs_plain(args, work / "defaults"),
            "batch64": lightning_vs_plain(args, work / "b64", "--batch_size", "64", "--max_epochs", "3"),
            "default_train": default_train(args, work),
        }
    write_json(RESULTS / f"{args.accelerator}.json", results)
    print(markdown(results))


if __name__ == "__main__":
    main()
