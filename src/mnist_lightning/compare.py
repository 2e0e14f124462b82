"""The three rungs side by side: plain PyTorch, Fabric and the Trainer, same seed, data, flags and device.

Each run is a fresh process (``python -m mnist_lightning.plain_pytorch`` / ``.train_fabric`` / ``.train``), so
wall time and peak memory are whole-process figures. Runs alternate (plain, Fabric, Trainer, then Trainer,
Fabric, plain, ...) so that a machine getting busier or quieter affects every rung alike. Times are the best
of the repeats (the ``timeit`` convention: interference only adds time) of each run's median epoch, epoch 0
(warm-up, compilation) excluded. Parity is read from what each run leaves behind: the per-epoch losses in its
``metrics.json`` and the final weights in its last checkpoint.
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from . import plain_pytorch
from .devices import check_accelerator
from .errors import ArgumentParser, UserError, bounded, run_main, true_or_false
from .records import OutputDirError, new_run_dir, write_json

RUNGS = {
    "plain": "mnist_lightning.plain_pytorch",
    "fabric": "mnist_lightning.train_fabric",
    "trainer": "mnist_lightning.train",
}
NAMES = {"plain": "plain PyTorch", "fabric": "Fabric", "trainer": "Trainer"}
DEVICE_FOR_ACCELERATOR = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "mps": "mps", "auto": "auto"}
# Flags every rung takes under the same name and meaning; None means "the rung's own default".
SHARED = ("data_dir", "dataset", "batch_size", "max_epochs", "val_size", "optimizer", "lr", "momentum")
SHARED += ("weight_decay", "lr_schedule", "pipeline", "num_workers", "seed", "float32_matmul_precision")
DATA_FLAGS = ("data_dir", "dataset", "val_size", "pipeline", "num_workers")  # MNISTDataModule's arguments
LOSSES = ("train/loss", "val/loss")
# With --compile, each rung compiles its own code: PyTorch's on-disk compilation caches can hand a process code
# that earlier runs compiled, and the compiled rungs' results then depend on what those runs were (see README).
COMPILE_CACHES = "TORCHINDUCTOR_FORCE_DISABLE_CACHES"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="compare.py", description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=sorted(DEVICE_FOR_ACCELERATOR), default="cpu")
    parser.add_argument("--rungs", nargs="+", choices=list(RUNGS), default=list(RUNGS), help="default: all three")
    parser.add_argument("--data_dir", default="data")
    # Each shared flag is checked as the plain rung checks it (type, range, choices), before any rung starts.
    plain = {action.dest: action for action in plain_pytorch.build_parser()._actions}
    for name in SHARED[1:]:
        rung = plain[name]
        parser.add_argument(
            f"--{name}", type=rung.type, choices=rung.choices, default=None, help="default: the rungs' own"
        )
    parser.add_argument("--repeats", type=bounded(int, 1), default=1, help="runs of each rung, alternated (default: 1)")
    parser.add_argument(
        "--deterministic",
        type=true_or_false,
        nargs="?",
        const=True,
        default=True,
        help="deterministic algorithms on every rung (default: true)",
    )
    parser.add_argument("--compile", type=true_or_false, nargs="?", const=True, default=False, help="torch.compile")
    parser.add_argument("--output_dir", default=None, help="default: a new folder under runs/")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    return parser


def rung_flags(args: argparse.Namespace, rung: str) -> list[str]:
    """The command line of one rung: the shared flags, then its own way of naming the device."""
    # train.py takes the data module's own arguments as --data.NAME; the other rungs, as plain flags.
    data = "data." if rung == "trainer" else ""
    flags = [
        f"--{data if name in DATA_FLAGS else ''}{name}={getattr(args, name)}"
        for name in SHARED
        if getattr(args, name) is not None
    ]
    flags += [f"--deterministic={str(args.deterministic).lower()}", f"--compile={str(args.compile).lower()}"]
    if rung == "plain":
        return [*flags, "--device", DEVICE_FOR_ACCELERATOR[args.accelerator]]
    flags += ["--accelerator", args.accelerator, "--devices", "1"]
    return flags + (["--enable_progress_bar=false"] if rung == "trainer" else [])


def run_rung(rung: str, flags: list[str], output_dir: Path) -> dict:
    """One run in a fresh process: its metrics.json, plus the process's wall time and its final weights."""
    command = [sys.executable, "-m", RUNGS[rung], *flags, "--output_dir", str(output_dir)]
    env = os.environ | ({COMPILE_CACHES: "1"} if "--compile=true" in flags else {})
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    wall_seconds = time.perf_counter() - start
    if result.returncode != 0:  # the rung's own message, which names the flag (the rungs take the same flags)
        message = (result.stderr.strip() or result.stdout.strip())[-2000:].removeprefix("Error: ")
        raise UserError(f"The {NAMES[rung]} run failed: {message}", exit_code=result.returncode)
    metrics = json.loads((output_dir / "metrics.json").read_text())
    return metrics | {"wall_seconds": wall_seconds, "weights_file": str(last_checkpoint(rung, output_dir))}


def last_checkpoint(rung: str, output_dir: Path) -> Path:
    return output_dir / "checkpoints" / ("last.ckpt" if rung == "trainer" else "last.pt")


def final_weights(rung: str, path: str | Path) -> dict:
    """The network's weights at the end of training, named as in ``SimpleNN((1, 28, 28), 10).state_dict()``."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if rung == "trainer":  # a Lightning checkpoint: the LightningModule's state, the network under "net."
        return {key.removeprefix("net."): value for key, value in checkpoint["state_dict"].items() if key[:4] == "net."}
    return checkpoint["model"]


def differences(left: dict, right: dict, left_rung: str, right_rung: str) -> dict:
    """The largest absolute differences between two runs: final weights, and per-epoch losses."""
    weights = final_weights(left_rung, left["weights_file"]), final_weights(right_rung, right["weights_file"])
    if weights[0].keys() != weights[1].keys():
        raise UserError(f"The runs saved different networks: {sorted(weights[0])} vs {sorted(weights[1])}.", 1)
    weight_gap = max((a - weights[1][k]).abs().max().item() for k, a in weights[0].items())
    losses = [[row[name] for row in run["history"] for name in LOSSES] for run in (left, right)]
    loss_gap = max((abs(a - b) for a, b in zip(*losses, strict=True)), default=0.0)
    test_gap = max(abs(left[name] - right[name]) for name in ("test/loss", "test/acc"))
    return {
        "weights_equal": all(torch.equal(a, weights[1][k]) for k, a in weights[0].items()),
        "losses_equal": losses[0] == losses[1] and test_gap == 0,
        "max_weight_difference": weight_gap,
        "max_loss_difference": loss_gap,
        "max_test_difference": test_gap,
    }


def summarize(runs: list[dict]) -> dict:
    # Epoch 0 carries one-off warm-up (first allocations, lazy initialization, compilation).
    epoch_seconds = [statistics.median(row["seconds"] for row in run["history"][1:] or run["history"]) for run in runs]
    peaks = [run["peak_gpu_mb"] for run in runs if run.get("peak_gpu_mb") is not None]
    return {
        "test/acc": runs[0]["test/acc"],
        "test/loss": runs[0]["test/loss"],
        "train/loss": [row["train/loss"] for row in runs[0]["history"]],
        "val/loss": [row["val/loss"] for row in runs[0]["history"]],
        "epoch_seconds": min(epoch_seconds),
        "first_epoch_seconds": min(run["history"][0]["seconds"] for run in runs),
        "wall_seconds": min(run["wall_seconds"] for run in runs),
        "peak_host_mb": max(run["peak_host_mb"] for run in runs),
        "peak_gpu_mb": max(peaks) if peaks else None,
        "accelerator": runs[0]["accelerator"],
        "batch_size": runs[0]["batch_size"],
        "epochs": runs[0]["epochs"],
        "weights_file": runs[0]["weights_file"],
    }


def compare(args: argparse.Namespace) -> dict:
    rungs = list(dict.fromkeys(args.rungs))
    check_accelerator(args.accelerator)  # in compare.py's terms, before any rung starts
    output_dir = new_run_dir(args.output_dir)
    runs: dict[str, list[dict]] = {rung: [] for rung in rungs}
    for repeat in range(args.repeats):
        for rung in rungs if repeat % 2 == 0 else reversed(rungs):
            # Progress on stderr (stdout is the table or the JSON): a run can take minutes at small batch sizes.
            print(f"Running {NAMES[rung]} ({repeat + 1} of {args.repeats})...", file=sys.stderr, flush=True)
            runs[rung].append(run_rung(rung, rung_flags(args, rung), output_dir / f"{rung}_{repeat}"))
    result: dict = {"rungs": {rung: summarize(rung_runs) for rung, rung_runs in runs.items()}}
    first = {rung: rung_runs[0] for rung, rung_runs in runs.items()}
    result["parity"] = {
        f"{left} vs {right}": differences(first[left], first[right], left, right)
        for left, right in itertools.combinations(rungs, 2)
    }
    if "plain" in rungs:
        plain = result["rungs"]["plain"]
        result["ratios_to_plain"] = {
            rung: {
                "epoch": summary["epoch_seconds"] / plain["epoch_seconds"],
                "wall": summary["wall_seconds"] / plain["wall_seconds"],
            }
            for rung, summary in result["rungs"].items()
            if rung != "plain"
        }
    result["settings"] = {**vars(args), "output_dir": str(output_dir)}
    write_json(output_dir / "compare.json", result)
    return result


def format_table(result: dict) -> str:
    rungs = result["rungs"]

    def row(label: str, values: list[str]) -> str:
        return f"{label:<26}" + "".join(f"{value:>16}" for value in values)

    def each(key: str, form: str) -> list[str]:
        return ["-" if summary[key] is None else format(summary[key], form) for summary in rungs.values()]

    ratios = result.get("ratios_to_plain")  # only when the plain rung ran

    def to_plain(key: str) -> list[str]:
        if ratios is None:
            return []
        return [row("  / plain", ["1.00x" if r == "plain" else f"{ratios[r][key]:.2f}x" for r in rungs])]

    lines = [
        row("", [NAMES[rung] for rung in rungs]),
        row("test accuracy (%)", [f"{100 * summary['test/acc']:.2f}" for summary in rungs.values()]),
        row("epoch (s), median", each("epoch_seconds", ".3f")),
        *to_plain("epoch"),
        row("whole process (s)", each("wall_seconds", ".2f")),
        *to_plain("wall"),
        row("peak host memory (MB)", each("peak_host_mb", ".0f")),
        row("peak GPU memory (MB)", each("peak_gpu_mb", ".0f")),
        "train/loss per epoch:",
    ]
    for epoch, losses in enumerate(zip(*(summary["train/loss"] for summary in rungs.values()), strict=True)):
        lines.append(row(f"  epoch {epoch}", [f"{loss:.9f}" for loss in losses]))
    lines.append("\nlargest absolute difference     final weights   per-epoch loss   test loss/acc")
    for pair, gap in result["parity"].items():
        verdict = "bit-identical" if gap["weights_equal"] and gap["losses_equal"] else "differ"
        left, right = pair.split(" vs ")
        lines.append(
            f"  {NAMES[left] + ' vs ' + NAMES[right]:<28}{gap['max_weight_difference']:>15.1e}"
            f"{gap['max_loss_difference']:>17.1e}{gap['max_test_difference']:>16.1e}   {verdict}"
        )
    first = next(iter(rungs.values()))
    lines.append(
        f"\n{first['accelerator']}, batch {first['batch_size']}, {first['epochs']} epochs, "
        f"best of {result['settings']['repeats']} alternated run(s); "
        f"JSON: {result['settings']['output_dir']}/compare.json"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def run() -> None:
        result = compare(build_parser().parse_args(argv))
        print(json.dumps(result, indent=2) if result["settings"]["json"] else format_table(result))

    return run_main(run, (OutputDirError,))


if __name__ == "__main__":
    sys.exit(main())
