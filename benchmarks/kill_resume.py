#!/usr/bin/env python
"""Interrupt a training run at random moments with SIGINT, SIGTERM and SIGKILL, resume each time as a user would,
and compare the finished run with an uninterrupted one: final weights, test metrics, per-epoch history.

    python benchmarks/kill_resume.py --data_dir data --interrupts 24      # results/kill_resume_cpu.json

Each interrupt lands a random 0.5 to --latest seconds after the (re)started process began: in start-up, in a
training step, in validation, while a checkpoint is written, or in testing. After SIGINT or SIGTERM the
command the run printed is pasted verbatim (split into words as a shell would); after SIGKILL, which prints
nothing, the README's resume command (`--output_dir <run> --ckpt_path last`). An interrupt counts as resumed
when the next command continues the run (finishes it, or is itself interrupted) instead of failing. The run
(configs/classic_sgd.yaml: batch 32) is long enough that the interrupts land before it ends; both runs use
--deterministic true, so they must end bit-identical.
"""

import argparse
import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

from mnist_lightning.core.records import write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from interrupts import ROOT, compare_runs, interrupt_and_resume, random_moments, train_command

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="data")
    parser.add_argument("--interrupts", type=int, default=24)
    parser.add_argument("--max_epochs", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=300, help="seconds a signalled run gets to stop")
    parser.add_argument("--latest", type=float, default=14.0, help="latest interrupt, seconds after a start")
    parser.add_argument("--seed", type=int, default=0, help="seed of the moments and signals")
    parser.add_argument("--output", default=str(RESULTS / "kill_resume_cpu.json"))
    args = parser.parse_args()
    # The config first: flags after it win.
    flags = ["--config", "configs/classic_sgd.yaml", "--data.data_dir", args.data_dir]
    flags += ["--max_epochs", str(args.max_epochs)]
    flags += ["--accelerator", "cpu", "--deterministic", "true", "--enable_progress_bar", "false"]
    moments = random_moments(args.interrupts, args.seed, args.latest)
    with TemporaryDirectory() as tmp:
        campaign = interrupt_and_resume(flags, Path(tmp) / "interrupted", moments, args.timeout)
        whole = Path(tmp) / "whole"
        subprocess.run(train_command(flags, whole), cwd=ROOT, check=True, capture_output=True)
        comparison = compare_runs(Path(tmp) / "interrupted", whole)
    events = campaign.interrupts
    equal = comparison["max_weight_difference"] == 0 and comparison["test/acc"][0] == comparison["test/acc"][1]
    equal = equal and comparison["history_epochs"] == list(range(args.max_epochs))
    result = {
        "command": " ".join(sys.argv),
        "flags": flags,
        "interrupts": len(events),
        "by_signal": {name: sum(e.signal == name for e in events) for name in ("SIGINT", "SIGTERM", "SIGKILL")},
        "resumed": sum(campaign.resumed()),
        "signals_that_did_not_stop_the_run": sum(event.ignored for event in events),
        "finished_equal_to_uninterrupted": equal,
        "finished_before_the_last_interrupt": campaign.finished_early,
        "final_exit_code": campaign.final_exit_code,
        "comparison": comparison,
        "events": [
            {key: value for key, value in vars(e).items() if key != "stderr_tail"} | {"said": e.stderr_tail[-300:]}
            for e in events
        ],
    }
    write_json(args.output, result)
    print(
        f"resumed {result['resumed']}/{result['interrupts']} interrupts {result['by_signal']}; final weights differ "
        f"by at most {comparison['max_weight_difference']}; test accuracy {comparison['test/acc'][0]:.4f} "
        f"interrupted, {comparison['test/acc'][1]:.4f} uninterrupted; epochs in metrics.json "
        f"{comparison['history_epochs']}"
    )


if __name__ == "__main__":
    main()
