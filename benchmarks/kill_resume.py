#!/usr/bin/env python
"""kill -9 a default training run at 20 random moments, resume each time, and compare with an uninterrupted run.

    python benchmarks/kill_resume.py --data_dir data --kills 20      # prints survived/total

Each kill lands a random 0-0.6 s after the restarted process wrote its first checkpoint: in a training step,
in validation or while a checkpoint is being written. A kill is survived when the last.ckpt it leaves behind
loads and training resumes from it (`--ckpt_path last`).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

from mnist_lightning.records import write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from interrupts import crash_and_resume, train_command

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--max_epochs", type=int, default=100, help="long enough to outlast every kill")
    parser.add_argument("--max_delay", type=float, default=0.6, help="latest kill, seconds after a checkpoint")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    args = parser.parse_args()
    flags = ["--data_dir", args.data_dir, "--max_epochs", str(args.max_epochs), "--accelerator", "cpu"]
    with TemporaryDirectory() as tmp:
        result = crash_and_resume(flags, Path(tmp) / "killed", args.kills, args.seed, args.max_delay)
        subprocess.run(train_command(flags, Path(tmp) / "whole"), check=True, capture_output=True)
        uninterrupted = json.loads((Path(tmp) / "whole" / "metrics.json").read_text())["test/acc"]
    result |= {"uninterrupted_test/acc": uninterrupted, "command": " ".join(sys.argv)}
    write_json(RESULTS / "kill_resume_cpu.json", result)
    print(
        f"survived {result['survived']}/{result['kills']} kills; test accuracy {100 * result['test/acc']:.2f} % "
        f"after them, {100 * uninterrupted:.2f} % uninterrupted"
    )


if __name__ == "__main__":
    main()
