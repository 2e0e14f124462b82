#!/usr/bin/env python
"""Everything that needs an NVIDIA GPU, in one command; writes gpu_check_<mode>.json and .md to --results_dir.

    python scripts/gpu_check.py            # on a machine with a CUDA GPU (make gpu-check)
    python scripts/gpu_check.py --cpu      # anywhere: the same steps on the CPU (make gpu-check-cpu)

It checks the project as it is configured: the data module and LightningModule that train.py builds by default
(core/classes.py), with the data module's own defaults unless --data.NAME VALUE says otherwise (as on train.py:
--data.data_dir DIR, say), and the metrics the LightningModule logs. Each step is a fresh process: the devices
report; train.py on one GPU, as a user types it; the project's other training scripts side by side, where it has
them; the tests marked gpu (in one process, as far as they can); evaluate, predict and export on the GPU-trained
checkpoint. Sized for the few minutes a GPU is lent: each process spends most of its time importing. With --cpu the
same steps run on the CPU (the gpu tests are then collected and skipped).
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

from mnist_lightning.core.cli import build_parser as train_parser
from mnist_lightning.core.devices import why_no_cuda
from mnist_lightning.core.errors import UserError, run_main

ROOT = Path(__file__).resolve().parents[1]


def script(name: str, *flags: str) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / name), *flags]


# The example's bar for a trained model; a project whose model logs no test/acc gives its own with --expect.
EXAMPLE_EXPECTATION = "test/acc>=0.85"
EXPECTATION = re.compile(r"(?P<name>[^<>=\s]+)\s*(?P<op>>=|<=)\s*(?P<bound>[-+.\deE]+)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py",
        description=__doc__.splitlines()[0],
        epilog="Any --data.NAME VALUE is given to the data module, as on train.py, evaluate.py and predict.py.",
    )
    parser.error = lambda message: parser.exit(2, f"Error: {message}\n")  # one line, without argparse's usage block
    parser.add_argument("--cpu", action="store_true", help="run every step on the CPU; skip what needs CUDA")
    parser.add_argument("--max_epochs", type=int, default=3, help="epochs of each training run (default: 3)")
    parser.add_argument("--batch_size", type=int, default=None, help="default: the template's")
    parser.add_argument(
        "--expect",
        action="append",
        metavar="METRIC>=VALUE",
        help=f"a bound on a metric of the trained run's metrics.json, e.g. test/loss<=0.3 (repeatable; default: "
        f"{EXAMPLE_EXPECTATION}, where the model logs it)",
    )
    results = ROOT / "runs" / "gpu_check"
    results = ROOT / "benchmarks" / "results"  # only with_benchmarks
    parser.add_argument("--results_dir", default=str(results), help=f"default: {results.relative_to(ROOT)}")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per step")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """gpu_check.py's own options, and the data module's (``--data.NAME VALUE`` or ``--data.NAME=VALUE``) as
    ``data_flags``, for every step that builds it."""
    parser = build_parser()
    args, others = parser.parse_known_args(argv)
    args.data_flags, rest = [], list(others)
    while rest:
        flag = rest.pop(0)
        if not flag.startswith("--data.") or ("=" not in flag and not rest):
            parser.error(f"unrecognized arguments: {' '.join([flag, *rest])}")
        args.data_flags += [flag] if "=" in flag else [flag, rest.pop(0)]
    for expectation in args.expect or []:
        if not EXPECTATION.fullmatch(expectation):
            parser.error(f"--expect {expectation}: give METRIC>=VALUE or METRIC<=VALUE, e.g. test/acc>=0.9")
    return args


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
            # In this folder, as the user typed it: a relative --data.data_dir is where they meant.
            result = subprocess.run(command, capture_output=True, text=True, timeout=self.args.timeout)
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

    def training_flags(self, run: str) -> list[str]:
        flags = [*self.args.data_flags, "--max_epochs", str(self.args.max_epochs)]
        flags += ["--batch_size", str(self.args.batch_size)] if self.args.batch_size is not None else []
        return [*flags, "--output_dir", str(self.work / run)]

    def trained(self, run: str):
        """A check of a training run's metrics.json: on the right device, trained (its --expect bounds)."""

        def check(output: str) -> str:
            metrics = json.loads((self.work / run / "metrics.json").read_text())
            assert metrics["accelerator"] == ("cuda" if self.gpu else "cpu"), f"ran on {metrics['accelerator']}"
            for expectation in self.args.expect or [EXAMPLE_EXPECTATION]:
                name, op, bound = EXPECTATION.fullmatch(expectation).groups()
                if name not in metrics and not self.args.expect:  # the example's bar, for a model that logs it
                    continue
                assert metrics.get(name) is not None, f"{name} is not in metrics.json: --expect a metric it logs"
                below = metrics[name] < float(bound) if op == ">=" else metrics[name] > float(bound)
                assert not below, f"{name} {metrics[name]:.4f}, not {op} {bound} (--expect)"
            epoch = min(row["seconds"] for row in metrics["history"])
            gpu_mb = metrics.get("peak_gpu_mb")
            return f"{tested(metrics)}, fastest epoch {epoch:.3f} s" + (
                f", peak GPU memory {gpu_mb:.0f} MB" if gpu_mb is not None else ""
            )

        return check


def tested(metrics: dict) -> str:
    """The test metrics the model logged, as train.py's results line says them."""
    scores = {name: value for name, value in metrics.items() if name.startswith("test/") and isinstance(value, float)}
    return ", ".join(f"{name} {value:.4f}" for name, value in scores.items()) or "not tested"


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


def ladder(check: Check, data) -> None:
    """compare.py: the three rungs on the device, and their parity (compiled: a gpu test). The rungs train the MNIST
    example (train_pytorch.py and train_fabric.py are self-contained): a project with data of its own skips them."""
    name = f"compare.py --accelerator {check.accelerator}"
    if not {"data_dir", "val_size"} <= set(data.hparams):
        check.skip(name, f"the rungs train the MNIST example; this project's data module is {type(data).__name__}")
        return
    flags = ["--accelerator", check.accelerator, "--data_dir", data.hparams.data_dir, "--val_size"]
    flags += [str(data.hparams.val_size), "--max_epochs", str(check.args.max_epochs)]
    flags += ["--batch_size", str(check.args.batch_size)] if check.args.batch_size is not None else []
    check.run(
        name,
        script("compare.py", *flags, "--output_dir", str(check.work / "compare")),
        lambda output: parity(check.work / "compare"),
    )


# end with_ladder
def use_checkpoint(check: Check, ckpt: str) -> None:
    """evaluate, predict and export on the checkpoint of the training run."""
    work, acc, data = check.work, check.accelerator, check.args.data_flags

    def evaluated(output: str) -> str:
        return tested(json.loads((work / "evaluate" / "metrics.json").read_text()))

    def predicted(output: str) -> str:
        rows = (work / "predictions.csv").read_text().splitlines()
        assert len(rows) > 1, "no predictions written"
        return f"{len(rows) - 1} samples of its predict_dataloader predicted: {rows[0]}"

    def exported(output: str) -> str:
        return ", ".join(sorted(path.name for path in (work / "export").iterdir()))

    flags = ["--ckpt_path", ckpt, "--accelerator", acc, *data]
    evaluate = script("evaluate.py", *flags, "--output_dir", str(work / "evaluate"))
    check.run(f"evaluate.py --accelerator {acc}", evaluate, evaluated)
    predict = script("predict.py", *flags, "--output", str(work / "predictions.csv"))
    check.run(f"predict.py --accelerator {acc}", predict, predicted)
    check.run(
        "export.py",
        script("export.py", "--ckpt_path", ckpt, "--output_dir", str(work / "export"), "--formats", "pt2", "onnx"),
        exported,
    )


def configured_data(args: argparse.Namespace):
    """The data module train.py builds from these --data flags: the project's default one, or --data CLASS."""
    parser = train_parser()
    return parser.instantiate_classes(parser.parse_args(args.data_flags)).data


def gpu_check(args: argparse.Namespace) -> None:
    if not args.cpu and not torch.cuda.is_available():
        raise UserError(
            f"No CUDA GPU can be used here: {why_no_cuda()}. Run `python scripts/gpu_check.py --cpu` (make "
            "gpu-check-cpu) to run the same steps on the CPU, or run this on a machine with an NVIDIA GPU."
        )
    data = configured_data(args)
    data.prepare_data()  # once, up front (a download, say): every step reads the same files
    mode = "cpu" if args.cpu else "gpu"
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        check = Check(args, Path(tmp))
        acc = check.accelerator
        check.run("devices.py", script("devices.py"), lambda out: out.strip().splitlines()[-1])
        flags = [*check.training_flags("train"), "--accelerator", acc, "--devices", "1"]
        train = script("train.py", *flags, "--enable_progress_bar", "false")
        check.run(f"train.py --accelerator {acc} --devices 1", train, check.trained("train"))
        ladder(check, data)  # only with_ladder
        pytest = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")]
        name = "pytest -m gpu" + ("" if check.gpu else " (collected; each test skips without CUDA)")
        check.run(name, pytest, pytest_summary)
        checkpoints = sorted((check.work / "train" / "checkpoints").glob("*.ckpt"))  # best-*.ckpt, else last.ckpt
        if checkpoints:
            use_checkpoint(check, str(checkpoints[0]))
        else:
            check.skip("evaluate / predict / export", "no checkpoint: the training run failed")
    failed = [step["step"] for step in check.steps if step["status"] == "failed"]
    machine = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__}
    machine |= {"cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name() if check.gpu else None}
    settings = vars(args) | {"data": type(data).__name__}
    results = {"mode": mode, "machine": machine, "settings": settings, "steps": check.steps, "failed": failed}
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
    args = parse_args(argv)
    return run_main(lambda: gpu_check(args), exiting=True)


if __name__ == "__main__":
    sys.exit(main())
