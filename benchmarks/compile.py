#!/usr/bin/env python
"""What `--compile true` (torch.compile) does on each rung: epoch time with and without it, and the time its
compilation adds to the first epoch, shown separately.

    python benchmarks/compile.py --data_dir data --repeats 3          # results/compile_cpu.json and .md

Both settings run through compare.py (each rung in its own process, rungs alternated), one after the other.
The first epoch's extra time is its time minus the median of the later ones; it holds the compilation on the
plain and Fabric rungs, but not all of it on the Trainer's, which compiles during its sanity check, before the
first epoch: the whole process's extra time is the complete cost on every rung.
"""

import argparse
from pathlib import Path
from tempfile import TemporaryDirectory

from mnist_lightning.compare import NAMES, compare
from mnist_lightning.compare import build_parser as compare_parser
from mnist_lightning.records import write_json

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max_epochs", type=int, default=12)
    parser.add_argument("--output", default=str(RESULTS / "compile_cpu.json"))
    args = parser.parse_args()
    settings = ["--data_dir", args.data_dir, "--accelerator", args.accelerator, "--repeats", str(args.repeats)]
    settings += ["--max_epochs", str(args.max_epochs)]
    runs = {}
    with TemporaryDirectory() as tmp:
        for compiled in (False, True):
            flags = [*settings, "--compile", str(compiled).lower(), "--output_dir", f"{tmp}/{compiled}"]
            runs[compiled] = compare(compare_parser().parse_args(flags))
    rows = {}
    for rung in runs[False]["rungs"]:
        eager, compiled = runs[False]["rungs"][rung], runs[True]["rungs"][rung]
        rows[rung] = {
            "epoch_seconds": eager["epoch_seconds"],
            "compiled_epoch_seconds": compiled["epoch_seconds"],
            "compiled_first_epoch_extra_seconds": compiled["first_epoch_seconds"] - compiled["epoch_seconds"],
            "wall_seconds": eager["wall_seconds"],
            "compiled_wall_seconds": compiled["wall_seconds"],
            "test/acc": eager["test/acc"],
            "compiled_test/acc": compiled["test/acc"],
        }
    parity = {pair: gap["weights_equal"] and gap["losses_equal"] for pair, gap in runs[True]["parity"].items()}
    result = {"settings": vars(args), "rungs": rows, "compiled_rungs_bit_identical": parity}
    write_json(args.output, result)
    lines = [
        "| rung | epoch | epoch, compiled | first epoch's extra, compiled | whole process | compiled | extra |",
        "|---|---|---|---|---|---|---|",
    ]
    for rung, row in rows.items():
        lines.append(
            f"| {NAMES[rung]} | {row['epoch_seconds']:.3f} s | {row['compiled_epoch_seconds']:.3f} s | "
            f"{row['compiled_first_epoch_extra_seconds']:.2f} s | {row['wall_seconds']:.1f} s | "
            f"{row['compiled_wall_seconds']:.1f} s | {row['compiled_wall_seconds'] - row['wall_seconds']:+.1f} s |"
        )
    table = "\n".join(lines)
    Path(args.output).with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"compiled rungs bit-identical to each other: {parity}")


if __name__ == "__main__":
    main()
