#!/usr/bin/env python
"""Speed figures of benchmarks/README.md, every run a fresh process, the processes compared alternated.

    python benchmarks/run.py --data_dir <MNIST root> --repeats 5     # writes benchmarks/results/cpu.json

1. ``floor``: a default ``python scripts/train.py --data.data_dir <root>`` against ``python -c "import lightning,
   jsonargparse"``, the least any Lightning program pays, and ``benchmarks/phases.py`` (the same run, clocked
   phase by phase). Each process runs in a pseudo-terminal, as from a shell, so the progress bar draws as it
   would for a user.
2. ``defaults``: plain PyTorch, Fabric and the Trainer at the template's defaults, through the building blocks of
   ``scripts/compare.py`` (the three rung scripts, same seed, data and flags, their output into a file): whole
   process and median epoch (epoch 0, the warm-up, left out), ratios to plain.
3. ``batch64``: the same at batch 64 (3 epochs), where the per-step costs dominate.

Each group's processes take turns (A B C, then C B A, ...), so a machine getting busier or quieter affects every
side alike. Figures are medians over the repeats, with the best (least disturbed) run beside them; ratios are
taken between medians, and between bests. The machine's load average is recorded before and after.
"""

import argparse
import fcntl
import importlib.metadata
import importlib.util
import json
import os
import platform
import pty
import re
import resource
import shlex
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

from mnist_lightning.core.records import write_json

ROOT = Path(__file__).resolve().parents[1]
# scripts/compare.py stands on its own, outside the package: its building blocks are loaded from the file.
_spec = importlib.util.spec_from_file_location("compare", ROOT / "scripts" / "compare.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)
RESULTS = Path(__file__).parent / "results"
FLOOR = [sys.executable, "-c", "import lightning, jsonargparse"]
# What the plain rung imports: torch and torchvision (and numpy), without Lightning.
TORCH_FLOOR = [sys.executable, "-c", "import torch, torchvision"]
# The plain rung's very process with ``import lightning`` first: the least any Lightning rung can take, since
# Fabric and the Trainer do the plain loop's work and import Lightning too.
PLAIN_AFTER_IMPORT = (
    f"import lightning, runpy; runpy.run_path({str(ROOT / 'scripts' / 'train_pytorch.py')!r}, run_name='__main__')"
)
PACKAGES = ("torch", "torchvision", "lightning", "torchmetrics", "jsonargparse", "numpy", "matplotlib", "rich")


def children_cpu_seconds() -> float:
    """CPU time (user and system) of this process's finished children: before and after one run, the difference
    is that run's, which does not grow while other processes hold the cores, unlike its wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def in_terminal(command: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """Run ``command`` with a 120x40 pseudo-terminal as stdout and stderr; its wall time, exit status, output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    output = bytearray()
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # EIO: the child's side has closed
            break
        if not chunk:
            break
        output += chunk
    code = process.wait()
    seconds = time.perf_counter() - start
    os.close(leader)
    return seconds, code, output.decode(errors="replace")


def checked(command: list[str], code: int, output: str) -> None:
    if code != 0:
        raise SystemExit(f"{shlex.join(command)} failed with exit status {code}:\n{output[-3000:]}")


def alternated(names: list[str], repeats: int):
    """(repeat, name) pairs, the order of the names reversed every other repeat."""
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            yield repeat, name


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "best": min(values), "runs": values}


def floor(args, work: Path) -> dict:
    """Default train.py against the import floor, and the same run clocked phase by phase."""
    seconds: dict[str, list[float]] = {"floor": [], "train": [], "phases": [], "torch floor": [], "plain+import": []}
    cpu: dict[str, list[float]] = {name: [] for name in seconds}
    phases: list[dict] = []
    accuracy = []
    for repeat, name in alternated(list(seconds), args.repeats):
        if name in ("floor", "torch floor"):
            command = FLOOR if name == "floor" else TORCH_FLOOR
        elif name == "plain+import":
            command = [sys.executable, "-c", PLAIN_AFTER_IMPORT, "--data_dir", args.data_dir]
            command += ["--output_dir", str(work / f"plain_import_{repeat}")]
        else:
            script = "scripts/train.py" if name == "train" else "benchmarks/phases.py"
            command = [
                sys.executable,
                script,
                "--data.data_dir",
                args.data_dir,
                "--output_dir",
                str(work / f"{name}_{repeat}"),
            ]
        env = os.environ | {"PHASES_SPAWN_TIME": repr(time.time())}
        cpu_before = children_cpu_seconds()
        wall, code, output = in_terminal(command, env)
        ended = time.time()
        checked(command, code, output)
        seconds[name].append(wall)
        cpu[name].append(children_cpu_seconds() - cpu_before)
        if name == "train":
            accuracy.append(json.loads((work / f"train_{repeat}" / "metrics.json").read_text())["test/acc"])
        if name == "phases":
            found = re.findall(r'\{"seconds".*\}', output)
            report = json.loads(found[-1])
            phases.append(report["seconds"] | {"exit": ended - report["main_returned_at"], "whole process": wall})
    summary = {name: spread(values) for name, values in seconds.items()}
    cpu_summary = {name: spread(values) for name, values in cpu.items()}
    return {
        "commands": {
            "floor": shlex.join(["python", *FLOOR[1:]]),
            "torch floor": shlex.join(["python", *TORCH_FLOOR[1:]]),
            "train": f"python scripts/train.py --data.data_dir {args.data_dir} --output_dir <new folder>",
            "phases": f"python benchmarks/phases.py --data.data_dir {args.data_dir} --output_dir <new folder>",
            "plain+import": f"python -c {shlex.quote(PLAIN_AFTER_IMPORT)} --data_dir {args.data_dir}",
        },
        "seconds": summary,
        "ratio": {
            "median": summary["train"]["median"] / summary["floor"]["median"],
            "best": summary["train"]["best"] / summary["floor"]["best"],
        },
        "plain_import_ratio": {
            "median": summary["plain+import"]["median"] / summary["floor"]["median"],
            "best": summary["plain+import"]["best"] / summary["floor"]["best"],
        },
        "cpu_seconds": cpu_summary,
        "cpu_ratio": {
            "median": cpu_summary["train"]["median"] / cpu_summary["floor"]["median"],
            "best": cpu_summary["train"]["best"] / cpu_summary["floor"]["best"],
        },
        "test/acc": accuracy,
        "phases_median": {name: statistics.median(run[name] for run in phases) for name in phases[0]},
        "phases": phases,
    }


def plain_after_lightning_import(flags: list[str], output_dir: Path) -> dict:
    command = [sys.executable, "-c", PLAIN_AFTER_IMPORT, *flags, "--output_dir", str(output_dir)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall_seconds = time.perf_counter() - start
    checked(command, result.returncode, result.stdout + result.stderr)
    return json.loads((output_dir / "metrics.json").read_text()) | {"wall_seconds": wall_seconds}


def rungs(args, work: Path, *flags: str) -> dict:
    """Plain, Fabric and Trainer in alternated processes: whole process and median epoch, ratios to plain. At the
    defaults also the plain process after ``import lightning`` (``plain+import``), the least a Lightning rung
    can take."""
    settings = compare.build_parser().parse_args(["--data_dir", args.data_dir, *flags])
    names = ["plain", "plain+import", "fabric", "trainer"] if not flags else ["plain", "fabric", "trainer"]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat, name in alternated(names, args.repeats):
        cpu_before = children_cpu_seconds()
        if name == "plain+import":
            run = plain_after_lightning_import(compare.rung_flags(settings, "plain"), work / f"plain_import_{repeat}")
        else:
            run = compare.run_rung(name, compare.rung_flags(settings, name), work / f"{name}_{repeat}")
        runs[name].append(run | {"cpu_seconds": children_cpu_seconds() - cpu_before})
    result: dict = {
        "command": "python scripts/compare.py " + shlex.join(["--data_dir", args.data_dir, *flags]),
        "rungs": {},
    }
    for name, rung_runs in runs.items():
        result["rungs"][name] = {
            # Epoch 0 carries the one-off warm-up (first allocations, lazy initialization).
            "epoch_seconds": spread([statistics.median(r["seconds"] for r in run["history"][1:]) for run in rung_runs]),
            "wall_seconds": spread([run["wall_seconds"] for run in rung_runs]),
            "cpu_seconds": spread([run["cpu_seconds"] for run in rung_runs]),
            "test/acc": rung_runs[0]["test/acc"],
        }
    plain = result["rungs"]["plain"]
    result["ratios_to_plain"] = {
        name: {
            f"{measure}_{kind}": summary[f"{measure}_seconds"][kind] / plain[f"{measure}_seconds"][kind]
            for measure in ("wall", "cpu", "epoch")
            for kind in ("median", "best")
        }
        for name, summary in result["rungs"].items()
        if name != "plain"
    }
    result["parity_with_plain"] = {
        name: compare.differences(runs["plain"][0], runs[name][0], "plain", name) for name in ("fabric", "trainer")
    }
    return result


def machine() -> dict:
    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in line
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").is_file()
        else platform.processor()
    )
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "platform": platform.platform(),
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "versions": versions,
    }


def markdown(results: dict) -> str:
    """The tables of benchmarks/README.md, straight from the measured results."""
    lines = [f"{results['threads']} thread(s) per process; medians (best) of alternated runs", ""]
    if "floor" in results:
        result = results["floor"]
        wall, cpu = result["seconds"], result["cpu_seconds"]

        def cells(name: str) -> str:
            return (
                f"{wall[name]['median']:.2f} ({wall[name]['best']:.2f}) | "
                f"{cpu[name]['median']:.2f} ({cpu[name]['best']:.2f})"
            )

        ratio, cpu_ratio = result["ratio"], result["cpu_ratio"]
        lines += [
            "| process | wall (s) | CPU (s) |",
            "|---|---|---|",
            f"| `{result['commands']['floor']}` | {cells('floor')} |",
            f"| `{result['commands']['torch floor']}` (what the plain rung imports) | {cells('torch floor')} |",
            f"| `python scripts/train.py --data.data_dir <root>` | {cells('train')} |",
            f"| train.py / floor | {ratio['median']:.2f}x ({ratio['best']:.2f}x) | "
            f"{cpu_ratio['median']:.2f}x ({cpu_ratio['best']:.2f}x) |",
            f"| the plain loop's default run after `import lightning` | {cells('plain+import')} |",
            f"| that / floor: the least a Lightning run of this work can take | "
            f"{result['plain_import_ratio']['median']:.2f}x ({result['plain_import_ratio']['best']:.2f}x) | |",
            "",
            "| phase of a default run (benchmarks/phases.py) | wall (s), median |",
            "|---|---|",
            *(f"| {name} | {value:.3f} |" for name, value in result["phases_median"].items()),
            "",
        ]
    names = {
        "plain": "plain PyTorch",
        "plain+import": "plain PyTorch after `import lightning` (the least a Lightning rung can take)",
        "fabric": "Fabric",
        "trainer": "Trainer",
    }
    for key, title in (("defaults", "defaults (batch 4096, 12 epochs)"), ("batch64", "batch 64, 3 epochs")):
        if key not in results:
            continue
        result = results[key]
        lines += [
            f"Rungs at {title}:",
            "",
            "| rung | whole process, wall (s) | / plain | whole process, CPU (s) | / plain | epoch (s) | / plain |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, summary in result["rungs"].items():
            ratios = result["ratios_to_plain"].get(
                name, dict.fromkeys(("wall_median", "cpu_median", "epoch_median"), 1)
            )
            lines.append(
                f"| {names[name]} | {summary['wall_seconds']['median']:.2f} | {ratios['wall_median']:.2f}x | "
                f"{summary['cpu_seconds']['median']:.2f} | {ratios['cpu_median']:.2f}x | "
                f"{summary['epoch_seconds']['median']:.3f} | {ratios['epoch_median']:.2f}x |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="a writable folder holding MNIST/raw/")
    parser.add_argument("--repeats", type=int, default=5, help="alternated runs of each process (default: 5)")
    groups = ["floor", "defaults", "batch64"]
    parser.add_argument("--only", nargs="+", choices=groups, default=groups, help="measure only these groups")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS for every process measured (default: unset, torch's own choice, one per core)",
    )
    parser.add_argument("--output", default=None, help="default: results/cpu.json (cpu_threads<N>.json with --threads)")
    args = parser.parse_args()
    if args.threads:  # inherited by every process started from here
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    args.output = args.output or str(RESULTS / (f"cpu_threads{args.threads}.json" if args.threads else "cpu.json"))
    args.data_dir = str(Path(args.data_dir).resolve())  # the train.py processes run in the repository's root
    results: dict = {}
    if Path(args.output).is_file() and set(args.only) != set(groups):  # update those groups, keep the others
        results = json.loads(Path(args.output).read_text())
        results.setdefault("earlier_commands", []).append(results.get("command"))
    results |= {"command": shlex.join(["python", "benchmarks/run.py", *sys.argv[1:]]), "machine": machine()}
    results["threads"] = args.threads or torch.get_num_threads()
    results["load_average_before"] = os.getloadavg()
    measures = {
        "floor": lambda work: floor(args, work),
        "defaults": lambda work: rungs(args, work),
        "batch64": lambda work: rungs(args, work, "--batch_size", "64", "--max_epochs", "3"),
    }
    with TemporaryDirectory() as tmp:
        for name in args.only:
            start = time.perf_counter()
            load_before = os.getloadavg()
            results[name] = measures[name](Path(tmp) / name)
            results[name]["load_average"] = {"before": load_before, "after": os.getloadavg()}
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    results["load_average_after"] = os.getloadavg()
    write_json(args.output, results)
    print(markdown(results))


if __name__ == "__main__":
    main()
