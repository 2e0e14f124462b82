#!/usr/bin/env python
"""What `--compile true` (torch.compile) does on each rung: epoch time with and without it, and the time its
compilation adds to the first epoch, shown separately.

    python benchmarks/compile.py --data_dir data --repeats 3          # results/compile_cpu.json and .md

Each repeat runs compare.py once eager and once compiled (each rung in its own process), the two settings
alternated from one repeat to the next (eager first, then compiled first, ...); each figure is the best of the
repeats. The first epoch's extra time is its time minus the median of the later ones; it holds the compilation
on the plain and Fabric rungs, but not all of it on the Trainer's, which compiles during its sanity check,
before the first epoch: the whole process's extra time is the complete cost on every rung. Every compiled run's
rungs are checked for bit-identical results.
"""

import argparse
import importlib.util
from pathlib import Path
from tempfile import TemporaryDirectory

from mnist_lightning.core.records import write_json

RESULTS = Path(__file__).parent / "results"
# scripts/compare.py stands on its own, outside the package: loaded from its file.
_spec = importlib.util.spec_from_file_location(
    "compare", Path(__file__).resolve().parents[1] / "scripts" / "compare.py"
)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max_epochs", type=int, default=12)
    parser.add_argument("--output", default=str(RESULTS / "compile_cpu.json"))
    args = parser.parse_args()
    settings = ["--data_dir", args.data_dir, "--accelerator", args.accelerator, "--max_epochs", str(args.max_epochs)]
    runs: dict[bool, list[dict]] = {False: [], True: []}
    with TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for compiled in (False, True) if repeat % 2 == 0 else (True, False):
                flags = [*settings, "--compile", str(compiled).lower(), "--output_dir", f"{tmp}/{compiled}_{repeat}"]
                runs[compiled].append(compare.compare(compare.parse_args(flags)))

    def best(compiled: bool, rung: str, key: str) -> float:
        return min(run["rungs"][rung][key] for run in runs[compiled])

    rows = {}
    for rung in runs[False][0]["rungs"]:
        compiled_runs = [run["rungs"][rung] for run in runs[True]]
        rows[rung] = {
            "epoch_seconds": best(False, rung, "epoch_seconds"),
            "compiled_epoch_seconds": best(True, rung, "epoch_seconds"),
            "compiled_first_epoch_extra_seconds": min(
                r["first_epoch_seconds"] - r["epoch_seconds"] for r in compiled_runs
            ),
            "wall_seconds": best(False, rung, "wall_seconds"),
            "compiled_wall_seconds": best(True, rung, "wall_seconds"),
            "test/acc": runs[False][0]["rungs"][rung]["test/acc"],
            "compiled_test/acc": compiled_runs[0]["test/acc"],
        }
    parity = {
        pair: all(run["parity"][pair]["weights_equal"] and run["parity"][pair]["losses_equal"] for run in runs[True])
        for pair in runs[True][0]["parity"]
    }
    result = {"settings": vars(args), "rungs": rows, "compiled_rungs_bit_identical_in_every_repeat": parity}
    write_json(args.output, result)
    lines = [
        "| rung | epoch | epoch, compiled | first epoch's extra, compiled | whole process | compiled | extra |",
        "|---|---|---|---|---|---|---|",
    ]
    for rung, row in rows.items():
        lines.append(
            f"| {compare.NAMES[rung]} | {row['epoch_seconds']:.3f} s | {row['compiled_epoch_seconds']:.3f} s | "
            f"{row['compiled_first_epoch_extra_seconds']:.2f} s | {row['wall_seconds']:.1f} s | "
            f"{row['compiled_wall_seconds']:.1f} s | {row['compiled_wall_seconds'] - row['wall_seconds']:+.1f} s |"
        )
    table = "\n".join(lines)
    Path(args.output).with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"compiled rungs bit-identical to each other in every repeat: {parity}")


if __name__ == "__main__":
    main()
