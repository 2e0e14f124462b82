"""Lightning template vs plain-PyTorch reference: same seed, data, batch size, epochs and device, side by side.

Each run is a fresh process (``python -m mnist_lightning.train`` / ``python -m mnist_lightning.plain_pytorch``),
so wall time and peak memory are whole-process figures. Runs alternate (Lightning, plain, plain, Lightning,
...) so that a machine getting busier or quieter affects both sides alike. Times are best-of-repeats (the
``timeit`` convention: interference only adds time) of each run's median epoch, epoch 0 (warm-up) excluded.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .errors import UserError, run_main
from .records import new_run_dir, write_json

SIDES = {"lightning": "mnist_lightning.train", "plain": "mnist_lightning.plain_pytorch"}
DEVICE_FOR_ACCELERATOR = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "mps": "mps", "auto": "auto"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compare.py", description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=sorted(DEVICE_FOR_ACCELERATOR), default="cpu")
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--batch_size", type=int, default=None, help="default: the template's")
    parser.add_argument("--max_epochs", type=int, default=None, help="default: the template's")
    parser.add_argument("--val_size", type=int, default=None, help="default: the template's")
    parser.add_argument("--pipeline", choices=["tensor", "per_sample"], default="tensor")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, alternated")
    parser.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="deterministic algorithms on both sides (default: on)",
    )
    parser.add_argument("--output_dir", default=None, help="default: a new folder under runs/")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    return parser


def side_flags(args: argparse.Namespace, side: str) -> list[str]:
    flags = ["--data_dir", args.data_dir, "--seed", str(args.seed), "--pipeline", args.pipeline]
    for name in ("batch_size", "max_epochs", "val_size"):
        if getattr(args, name) is not None:
            flags += [f"--{name}", str(getattr(args, name))]
    if side == "lightning":
        return [*flags, "--accelerator", args.accelerator, "--devices", "1", "--deterministic", str(args.deterministic)]
    return [*flags, "--device", DEVICE_FOR_ACCELERATOR[args.accelerator]] + (["--deterministic"] * args.deterministic)


def run_side(side: str, flags: list[str], output_dir: Path) -> dict:
    start = time.perf_counter()
    command = [sys.executable, "-m", SIDES[side], *flags, "--output_dir", str(output_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    wall_seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise UserError(f"The {side} run failed ({' '.join(command)}): {result.stderr.strip()[-2000:]}", exit_code=1)
    metrics = json.loads((output_dir / "metrics.json").read_text())
    return metrics | {"wall_seconds": wall_seconds}


def summarize(runs: list[dict]) -> dict:
    # Epoch 0 carries one-off warm-up (first allocations, lazy initialization); later epochs are the steady state.
    # Each run's median epoch, then the best run: on a shared machine, interference only ever adds time.
    epoch_seconds = [statistics.median(row["seconds"] for row in run["history"][1:] or run["history"]) for run in runs]
    peaks = [run["peak_gpu_mb"] for run in runs if run.get("peak_gpu_mb") is not None]
    return {
        "test/acc": runs[0]["test/acc"],
        "train/loss": [row["train/loss"] for row in runs[0]["history"]],
        "epoch_seconds": min(epoch_seconds),
        "wall_seconds": min(run["wall_seconds"] for run in runs),
        "peak_host_mb": max(run["peak_host_mb"] for run in runs),
        "peak_gpu_mb": max(peaks) if peaks else None,
        "accelerator": runs[0]["accelerator"],
        "batch_size": runs[0]["batch_size"],
        "epochs": runs[0]["epochs"],
    }


def compare(args: argparse.Namespace) -> dict:
    output_dir = new_run_dir(args.output_dir)
    runs: dict[str, list[dict]] = {"lightning": [], "plain": []}
    for repeat in range(args.repeats):
        order = ("lightning", "plain") if repeat % 2 == 0 else ("plain", "lightning")
        for side in order:
            runs[side].append(run_side(side, side_flags(args, side), output_dir / f"{side}_{repeat}"))
    result = {side: summarize(side_runs) for side, side_runs in runs.items()}
    lightning, plain = result["lightning"], result["plain"]
    result["epoch_time_ratio"] = lightning["epoch_seconds"] / plain["epoch_seconds"]
    result["max_train_loss_difference"] = max(
        abs(a - b) for a, b in zip(lightning["train/loss"], plain["train/loss"], strict=True)
    )
    result["settings"] = {**vars(args), "output_dir": str(output_dir)}
    write_json(output_dir / "compare.json", result)
    return result


def format_table(result: dict) -> str:
    lightning, plain = result["lightning"], result["plain"]

    def row(label: str, left: str, right: str) -> str:
        return f"{label:<24}{left:>14}{right:>16}"

    def mb(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = [
        row("", "Lightning", "plain PyTorch"),
        row("test accuracy", f"{100 * lightning['test/acc']:.2f} %", f"{100 * plain['test/acc']:.2f} %"),
        row("epoch (s)", f"{lightning['epoch_seconds']:.3f}", f"{plain['epoch_seconds']:.3f}"),
        row("wall, with imports (s)", f"{lightning['wall_seconds']:.1f}", f"{plain['wall_seconds']:.1f}"),
        row("peak host memory (MB)", mb(lightning["peak_host_mb"]), mb(plain["peak_host_mb"])),
        row("peak GPU memory (MB)", mb(lightning["peak_gpu_mb"]), mb(plain["peak_gpu_mb"])),
        "train/loss per epoch:",
    ]
    for epoch, (ours, theirs) in enumerate(zip(lightning["train/loss"], plain["train/loss"], strict=True)):
        lines.append(row(f"  epoch {epoch}", f"{ours:.6f}", f"{theirs:.6f}"))
    lines.append(
        f"\nLightning/plain epoch time: {result['epoch_time_ratio']:.2f}x "
        f"({lightning['accelerator']}, batch {lightning['batch_size']}, {lightning['epochs']} epochs); "
        f"largest train/loss difference: {result['max_train_loss_difference']:.1e}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def run() -> None:
        result = compare(build_parser().parse_args(argv))
        print(json.dumps(result, indent=2) if result["settings"]["json"] else format_table(result))

    return run_main(run)
