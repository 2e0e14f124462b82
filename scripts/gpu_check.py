#!/usr/bin/env python
"""Everything that needs an NVIDIA GPU, in one command; writes gpu_check_<mode>.json and .md to --results_dir.

    python scripts/gpu_check.py --data_dir data          # on a machine with a CUDA GPU (make gpu-check)
    python scripts/gpu_check.py --cpu --data_dir data    # anywhere: the same steps on the CPU (make gpu-check-cpu)

Each step is a fresh process: the devices report; train.py on one GPU, as a user types it; the project's other
training scripts side by side, where it has them; the tests marked gpu (in one process, as far as they can);
evaluate, predict and export on the GPU-trained checkpoint. Sized for the few minutes a GPU is lent: each process
spends most of its time importing. With --cpu the same steps run on the CPU (the gpu tests are then collected and
skipped).
"""

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mnist_lightning.core.devices import why_no_cuda
from mnist_lightning.core.errors import UserError, run_main
from mnist_lightning.datamodule import MNISTDataModule

ROOT = Path(__file__).resolve().parents[1]


def script(name: str, *flags: str) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / name), *flags]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--cpu", action="store_true", help="run every step on the CPU; skip what needs CUDA")
    parser.add_argument("--max_epochs", type=int, default=3, help="epochs of each training run (default: 3)")
    parser.add_argument("--batch_size", type=int, default=None, help="default: the template's")
    parser.add_argument("--val_size", type=int, default=None, help="default: the template's")
    parser.add_argument("--min_acc", type=float, default=0.85, help="lowest test accuracy that counts as trained")
    results = ROOT / "runs" / "gpu_check"
    results = ROOT / "benchmarks" / "results"  # only with_benchmarks
    parser.add_argument("--results_dir", default=str(results), help=f"default: {results.relative_to(ROOT)}")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per step")
    return parser


class StepsFailed(UserError):
    exit_code = 1  # the check ran; not a usage error


class Check:
    """Runs the steps, each in its own process, and keeps one record per step."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work, self.steps = args, work, []
        self.gpu = not args.cpu
        self.accelerator = "gpu" if self.gpu else "cpu"

    def run(self, name: str, command: list[str], check=None) -> None:
        """Run ``command``; ``check(output)`` returns a note, or raises AssertionError to fail the step."""
        start = time.perf_counter()
        try:
            result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=self.args.timeout)
            output, code = result.stdout + result.stderr, result.returncode
        except subprocess.TimeoutExpired as error:
            output, code = f"{error.stdout or ''}{error.stderr or ''}\ntimed out after {self.args.timeout} s", -1
        step = {"step": name, "command": " ".join(command[1:]), "seconds": round(time.perf_counter() - start, 1)}
        step["exit_code"] = code
        try:
            if code != 0:
                raise AssertionError(f"exit code {code}")
            step |= {"status": "ok", "note": check(output) if check else ""}
        except (AssertionError, KeyError, ValueError, OSError) as error:
            step |= {"status": "failed", "note": str(error), "output_tail": output[-3000:]}
        print(f"{step['status']:>7}  {name}  ({step['seconds']} s)  {step['note']}", flush=True)
        self.steps.append(step)

    def skip(self, name: str, reason: str) -> None:
        print(f"skipped  {name}  ({reason})", flush=True)
        self.steps.append({"step": name, "status": "skipped", "note": reason})

    def data_flags(self, trainer: bool = False) -> list[str]:
        """The data flags: train.py's (``trainer``: --data.NAME), or the other scripts' (--NAME)."""
        data = "--data." if trainer else "--"
        flags = [f"{data}data_dir", self.args.data_dir, "--max_epochs", str(self.args.max_epochs)]
        flags += ["--batch_size", str(self.args.batch_size)] if self.args.batch_size is not None else []
        flags += [f"{data}val_size", str(self.args.val_size)] if self.args.val_size is not None else []
        return flags

    def training_flags(self, run: str, trainer: bool = False) -> list[str]:
        return [*self.data_flags(trainer), "--output_dir", str(self.work / run)]

    def trained(self, run: str):
        """A check of a training run's metrics.json: on the right device, trained."""

        def check(output: str) -> str:
            metrics = json.loads((self.work / run / "metrics.json").read_text())
            assert metrics["accelerator"] == ("cuda" if self.gpu else "cpu"), f"ran on {metrics['accelerator']}"
            accuracy = metrics["test/acc"]
            assert accuracy >= self.args.min_acc, f"test accuracy {accuracy:.4f}, below --min_acc {self.args.min_acc}"
            epoch = min(row["seconds"] for row in metrics["history"])
            gpu_mb = metrics.get("peak_gpu_mb")
            return f"test/acc {accuracy:.4f}, fastest epoch {epoch:.3f} s" + (
                f", peak GPU memory {gpu_mb:.0f} MB" if gpu_mb is not None else ""
            )

        return check


def pytest_summary(output: str) -> str:
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", summary))
    assert not counts.get("failed") and not counts.get("error") and not counts.get("errors"), summary
    return summary.strip("= ")


# with_ladder:
def parity(compare_dir: Path) -> str:
    result = json.loads((compare_dir / "compare.json").read_text())
    gaps = result["parity"]
    differing = {pair: gap for pair, gap in gaps.items() if not (gap["weights_equal"] and gap["losses_equal"])}
    ratios = ", ".join(f"{rung} {ratio['epoch']:.2f}x" for rung, ratio in result["ratios_to_plain"].items())
    largest = ", ".join(f"{pair} {gap['max_weight_difference']:.1e}" for pair, gap in differing.items())
    verdict = f"NOT bit-identical: largest weight difference {largest}" if differing else "bit-identical"
    return f"{verdict}; epoch time / plain: {ratios}"


def ladder(check: Check) -> None:
    """compare.py: the three rungs on the device, and their parity (compiled: a gpu test)."""
    flags = ["--accelerator", check.accelerator, *check.data_flags(), "--output_dir", str(check.work / "compare")]
    check.run(
        f"compare.py --accelerator {check.accelerator}",
        script("compare.py", *flags),
        lambda output: parity(check.work / "compare"),
    )


# end with_ladder
def use_checkpoint(check: Check, ckpt: str, data_dir: str) -> None:
    """evaluate, predict and export on the checkpoint of the 32-true training run."""
    work, acc = check.work, check.accelerator

    def evaluated(output: str) -> str:
        return f"test/acc {json.loads((work / 'evaluate' / 'metrics.json').read_text())['test/acc']:.4f}"

    def predicted(output: str) -> str:
        rows = (work / "predictions.csv").read_text().splitlines()
        assert len(rows) > 1, "no predictions written"
        return f"{len(rows) - 1} images predicted"

    def exported(output: str) -> str:
        return ", ".join(sorted(path.name for path in (work / "export").iterdir()))

    flags = ["--ckpt_path", ckpt, "--accelerator", acc]
    evaluate = script("evaluate.py", *flags, "--output_dir", str(work / "evaluate"))
    check.run(f"evaluate.py --accelerator {acc}", evaluate, evaluated)
    inputs = []  # none: predict.py predicts the data module's predict set
    # with_digit_photos:
    raw = Path(data_dir, "MNIST", "raw")  # the test images as a file, read as pictures are
    inputs = [str(next(p for p in (raw / "t10k-images-idx3-ubyte", raw / "t10k-images-idx3-ubyte.gz") if p.is_file()))]
    # end with_digit_photos
    predict = script("predict.py", *inputs, *flags, "--output", str(work / "predictions.csv"))
    check.run(f"predict.py --accelerator {acc}", predict, predicted)
    check.run(
        "export.py",
        script("export.py", "--ckpt_path", ckpt, "--output_dir", str(work / "export"), "--formats", "pt2", "onnx"),
        exported,
    )


def gpu_check(args: argparse.Namespace) -> None:
    if not args.cpu and not torch.cuda.is_available():
        raise UserError(
            f"No CUDA GPU can be used here: {why_no_cuda()}. Run `python scripts/gpu_check.py --cpu` (make "
            "gpu-check-cpu) to run the same steps on the CPU, or run this on a machine with an NVIDIA GPU."
        )
    args.data_dir = str(Path(args.data_dir).resolve())  # the steps run in the repository's root folder
    sizes = {"val_size": args.val_size} if args.val_size is not None else {}
    MNISTDataModule(args.data_dir, **sizes).prepare_data()  # once, up front: every step reads the same files
    mode = "cpu" if args.cpu else "gpu"
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        check = Check(args, Path(tmp))
        acc = check.accelerator
        check.run("devices.py", script("devices.py"), lambda out: out.strip().splitlines()[-1])
        flags = [*check.training_flags("train", trainer=True), "--accelerator", acc, "--devices", "1"]
        train = script("train.py", *flags, "--enable_progress_bar", "false")
        check.run(f"train.py --accelerator {acc} --devices 1", train, check.trained("train"))
        ladder(check)  # only with_ladder
        pytest = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")]
        name = "pytest -m gpu" + ("" if check.gpu else " (collected; each test skips without CUDA)")
        check.run(name, pytest, pytest_summary)
        checkpoints = sorted((check.work / "train" / "checkpoints").glob("best-*.ckpt"))
        if checkpoints:
            use_checkpoint(check, str(checkpoints[0]), args.data_dir)
        else:
            check.skip("evaluate / predict / export", "no checkpoint: the training run failed")
    failed = [step["step"] for step in check.steps if step["status"] == "failed"]
    machine = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__}
    machine |= {"cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name() if check.gpu else None}
    results = {"mode": mode, "machine": machine, "settings": vars(args), "steps": check.steps, "failed": failed}
    results_dir = Path(args.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"gpu_check_{mode}.json").write_text(json.dumps(results, indent=2) + "\n")
    (results_dir / f"gpu_check_{mode}.md").write_text(markdown(results))
    done = len(check.steps) - len(failed)
    print(f"\n{done} of {len(check.steps)} steps ok or skipped; {results_dir}/gpu_check_{mode}.json")
    if failed:
        raise StepsFailed(f"{len(failed)} step(s) failed: {'; '.join(failed)}. See gpu_check_{mode}.json.")


def markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [
        f"# GPU check ({results['mode']} mode)\n",
        f"{machine['gpu'] or 'no GPU (CPU mode)'}; torch {machine['torch']} (CUDA {machine['cuda']}), "
        f"Python {machine['python']}, {machine['platform']}\n",
        "| step | status | seconds | result |",
        "|---|---|---|---|",
    ]
    for step in results["steps"]:
        lines.append(f"| `{step['step']}` | {step['status']} | {step.get('seconds', '-')} | {step['note']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: gpu_check(args), exiting=True)


if __name__ == "__main__":
    sys.exit(main())
