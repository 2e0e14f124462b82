#!/usr/bin/env python
"""The three rungs side by side: `python scripts/compare.py --accelerator cpu` (plain PyTorch, Fabric, Trainer).

Runs scripts/train_pytorch.py, scripts/train_fabric.py and scripts/train_trainer.py with the same seed, data and
flags, each in a fresh process, and reads back what each run left: the per-epoch losses of its metrics.json and
the network's weights in its last checkpoint. Parity means bit for bit: torch.equal on every weight and == on every
loss. Runs alternate (plain, Fabric, Trainer, then Trainer, Fabric, plain, ...) so that a machine getting busier
or quieter affects every rung alike; each time is the best of the repeats (interference only adds time): the
fit, the median epoch (epoch 0, its warm-up and compilation, left out) and the whole process. Prints a table (or
JSON with --json) and writes compare.json in the run folder, beside each run's folder and output (<rung>_<n>.log).
"""

import argparse
import itertools
import json
import os
import runpy
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

SCRIPTS = Path(__file__).resolve().parent
RUNGS = {"plain": "train_pytorch.py", "fabric": "train_fabric.py", "trainer": "train_trainer.py"}
NAMES = {"plain": "plain PyTorch", "fabric": "Fabric", "trainer": "Trainer"}
DEVICE_FOR_ACCELERATOR = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "mps": "mps", "auto": "auto"}
SHARED_FLAGS = ("data_dir", "val_size", "split_seed", "batch_size", "max_epochs", "seed", "optimizer", "lr")
SHARED_FLAGS += ("momentum", "weight_decay", "lr_schedule", "float32_matmul_precision")
LOSSES = ("train/loss", "val/loss")
# With --compile, each process compiles its own code: PyTorch's on-disk compilation caches could hand a process code
# that earlier runs compiled, and its results would then depend on what those runs were.
COMPILE_CACHES = "TORCHINDUCTOR_FORCE_DISABLE_CACHES"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.error = lambda message: parser.exit(2, f"Error: {message}\n")  # without argparse's usage block
    parser.add_argument("--accelerator", choices=sorted(DEVICE_FOR_ACCELERATOR), default="cpu")
    parser.add_argument("--rungs", nargs="+", choices=list(RUNGS), default=list(RUNGS), help="default: all three")
    parser.add_argument("--data_dir", default="data")
    # Left out, a setting is each rung's own default (the same on every rung).
    for name, kind in (("val_size", int), ("split_seed", int), ("batch_size", int), ("max_epochs", int)):
        parser.add_argument(f"--{name}", type=kind, help="default: the rungs' own")
    parser.add_argument("--seed", type=int, help="default: the rungs' own")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], help="default: the rungs' own")
    for name in ("lr", "momentum", "weight_decay"):
        parser.add_argument(f"--{name}", type=float, help="default: the rungs' own")
    parser.add_argument("--lr_schedule", choices=["cosine", "constant"], help="default: the rungs' own")
    parser.add_argument("--float32_matmul_precision", choices=["highest", "high", "medium"])
    on_off = {"choices": ["true", "false"], "nargs": "?", "const": "true"}
    parser.add_argument("--deterministic", **on_off, default="true", help="deterministic algorithms (default: true)")
    parser.add_argument("--compile", **on_off, default="false", help="torch.compile the network (default: false)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each rung, alternated (default: 1)")
    parser.add_argument("--output_dir", help="default: a new folder under runs/")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, refused before any rung starts if it cannot work."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        parser.error(f"--accelerator {args.accelerator}: PyTorch finds no CUDA GPU here; use --accelerator cpu")
    args.deterministic, args.compile = args.deterministic == "true", args.compile == "true"
    plain_rung = runpy.run_path(str(SCRIPTS / RUNGS["plain"]))  # its checks of the flags all rungs share
    plain = plain_rung["parse_args"](rung_flags(args, "plain"))
    args.output_dir = args.output_dir or time.strftime("runs/compare_%Y-%m-%d_%H-%M-%S")
    if Path(args.output_dir).is_dir() and any(Path(args.output_dir).iterdir()):
        parser.error(f"{args.output_dir} holds an earlier run's files: pass a new --output_dir, or none")
    try:  # and of the data: there (or downloaded now, once), with more training images than --val_size
        plain_rung["mnist"](plain.data_dir, plain.val_size, plain.split_seed)
    except (OSError, RuntimeError, ValueError) as error:  # a --val_size too large is a usage error, as on train.py
        parser.exit(2 if isinstance(error, ValueError) else 1, f"Error: {' '.join(str(error).split())}\n")
    return args


def rung_flags(args: argparse.Namespace, rung: str) -> list[str]:
    """The command line of one rung: the same settings on every rung, then its own way of naming the device."""
    flags = [f"--{name}={getattr(args, name)}" for name in SHARED_FLAGS if getattr(args, name) is not None]
    flags += [f"--deterministic={str(args.deterministic).lower()}", f"--compile={str(args.compile).lower()}"]
    if rung == "plain":
        return [*flags, f"--device={DEVICE_FOR_ACCELERATOR[args.accelerator]}"]
    return [*flags, f"--accelerator={args.accelerator}", "--devices=1"]


def run_rung(rung: str, flags: list[str], output_dir: Path) -> dict:
    """One run in a fresh process, its output in ``<output_dir>.log``: its metrics.json, with the process's wall
    time and the path of its last checkpoint added."""
    command = [sys.executable, str(SCRIPTS / RUNGS[rung]), *flags, f"--output_dir={output_dir}"]
    env = os.environ | ({COMPILE_CACHES: "1"} if "--compile=true" in flags else {})
    log = output_dir.with_name(f"{output_dir.name}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as output:
        code = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env).returncode
    wall_seconds = time.perf_counter() - start
    if code != 0:  # the rung's own last words, which name the flag (the rungs take the same flags)
        last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "no output")
        print(f"Error: the {NAMES[rung]} run failed: {last.removeprefix('Error: ')} (see {log})", file=sys.stderr)
        raise SystemExit(code)
    checkpoint = output_dir / "checkpoints" / ("last.ckpt" if rung == "trainer" else "last.pt")
    metrics = json.loads((output_dir / "metrics.json").read_text())
    return metrics | {"wall_seconds": wall_seconds, "weights_file": str(checkpoint)}


def final_weights(rung: str, path: str | Path) -> dict[str, torch.Tensor]:
    """The network's weights at the end of training, named as in ``SimpleNN((1, 28, 28), 10).state_dict()``."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if rung == "trainer":  # a Lightning checkpoint: the LightningModule's state, the network's under "net."
        return {key[4:]: value for key, value in checkpoint["state_dict"].items() if key.startswith("net.")}
    return checkpoint["model"]


def differences(left: dict, right: dict, left_rung: str, right_rung: str) -> dict:
    """Whether two runs ended bit-identical, and their largest absolute differences: weights, losses, test."""
    weights = final_weights(left_rung, left["weights_file"]), final_weights(right_rung, right["weights_file"])
    if weights[0].keys() != weights[1].keys():
        sys.exit(f"Error: the runs saved different networks: {sorted(weights[0])} and {sorted(weights[1])}.")
    losses = [[row[name] for row in run["history"] for name in LOSSES] for run in (left, right)]
    test_gap = max(abs(left[name] - right[name]) for name in ("test/loss", "test/acc"))
    return {
        "weights_equal": all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0]),
        "losses_equal": losses[0] == losses[1] and test_gap == 0,
        "max_weight_difference": max((weights[0][key] - weights[1][key]).abs().max().item() for key in weights[0]),
        "max_loss_difference": max((abs(a - b) for a, b in zip(*losses, strict=True)), default=0.0),
        "max_test_difference": test_gap,
    }


def summarize(runs: list[dict]) -> dict:
    """One rung's results (from its first run) and times (the best over its runs)."""
    epochs = [statistics.median(row["seconds"] for row in run["history"][1:] or run["history"]) for run in runs]
    return {
        "test/acc": runs[0]["test/acc"],
        "test/loss": runs[0]["test/loss"],
        "train/loss": [row["train/loss"] for row in runs[0]["history"]],
        "val/loss": [row["val/loss"] for row in runs[0]["history"]],
        "fit_seconds": min(run["fit_seconds"] for run in runs),
        "epoch_seconds": min(epochs),
        "first_epoch_seconds": min(run["history"][0]["seconds"] for run in runs),
        "wall_seconds": min(run["wall_seconds"] for run in runs),
        "accelerator": runs[0]["accelerator"],
        "weights_file": runs[0]["weights_file"],
    }


def compare(args: argparse.Namespace) -> dict:
    rungs, output_dir = list(dict.fromkeys(args.rungs)), Path(args.output_dir)
    runs: dict[str, list[dict]] = {rung: [] for rung in rungs}
    for repeat in range(args.repeats):
        for rung in rungs if repeat % 2 == 0 else reversed(rungs):
            # Progress on stderr (stdout is the table or the JSON): a run can take minutes at small batch sizes.
            print(f"Running {NAMES[rung]} ({repeat + 1} of {args.repeats})...", file=sys.stderr, flush=True)
            runs[rung].append(run_rung(rung, rung_flags(args, rung), output_dir / f"{rung}_{repeat}"))
    result: dict = {"rungs": {rung: summarize(rung_runs) for rung, rung_runs in runs.items()}}
    result["parity"] = {
        f"{left} vs {right}": differences(runs[left][0], runs[right][0], left, right)
        for left, right in itertools.combinations(rungs, 2)
    }
    if "plain" in rungs:
        plain = result["rungs"]["plain"]
        result["ratios_to_plain"] = {
            rung: {key: summary[f"{key}_seconds"] / plain[f"{key}_seconds"] for key in ("fit", "epoch", "wall")}
            for rung, summary in result["rungs"].items()
            if rung != "plain"
        }
    result["settings"] = vars(args)
    (output_dir / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_table(result: dict) -> str:
    rungs, ratios = result["rungs"], result.get("ratios_to_plain")  # ratios only when the plain rung ran

    def row(label: str, values: list[str]) -> str:
        return f"{label:<26}" + "".join(f"{value:>16}" for value in values)

    def timed(label: str, key: str) -> list[str]:
        lines = [row(label, [f"{summary[f'{key}_seconds']:.3f}" for summary in rungs.values()])]
        if ratios is not None:
            lines.append(row("  / plain", ["1.00x" if r == "plain" else f"{ratios[r][key]:.2f}x" for r in rungs]))
        return lines

    lines = [
        row("", [NAMES[rung] for rung in rungs]),
        row("test accuracy (%)", [f"{100 * summary['test/acc']:.2f}" for summary in rungs.values()]),
        *timed("fit (s)", "fit"),
        *timed("epoch (s), median", "epoch"),
        *timed("whole process (s)", "wall"),
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
    settings = result["settings"]
    lines.append(
        f"\n{next(iter(rungs.values()))['accelerator']}, best of {settings['repeats']} alternated run(s); "
        f"JSON: {settings['output_dir']}/compare.json"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    result = compare(parse_args(argv))
    print(json.dumps(result, indent=2) if result["settings"]["json"] else format_table(result))


def stop(signum: int, frame: object) -> None:
    """SIGTERM, raised as Ctrl-C is: on its way out, subprocess.run kills the rung it is running (which would
    otherwise go on training into the run folder)."""
    raise KeyboardInterrupt(signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop)
    try:
        main()
    except KeyboardInterrupt as stopped:  # a note and the shell's status for the signal (128 + its number)
        signum = stopped.args[0] if stopped.args else signal.SIGINT
        print("\nInterrupted." if signum == signal.SIGINT else "\nStopped by SIGTERM.", file=sys.stderr)
        sys.exit(128 + signum)
