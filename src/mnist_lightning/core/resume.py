"""Resuming a run: ``train.py --output_dir RUN --ckpt_path last`` goes on from RUN's last.ckpt with the options of
RUN's config.yaml. Its own parser takes only what may change between a run's segments, so any other flag is refused
as unknown; and every checkpoint keeps a fingerprint of the record it was trained with, so a record edited, cut short
or damaged since is refused before anything is written."""

import hashlib
import inspect
import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch import Trainer

from .checkpoints import read_checkpoint
from .errors import UserError
from .records import RUN_RECORD

# How long a run trains, where and how it shows progress, where its data is and how it is read: not what the run is.
RESUMABLE_TRAINER = {"max_epochs", "max_time", "accelerator", "devices", "num_nodes", "strategy", "callbacks"}
RESUMABLE_TRAINER |= {"enable_progress_bar", "enable_model_summary", "limit_test_batches"}
RESUMABLE = RESUMABLE_TRAINER | {"quiet", "data.data_dir", "data.num_workers", "output_dir"}


def build_resume_parser() -> ArgumentParser:
    about = "Resume the run in --output_dir from its last.ckpt and config.yaml; only these options may change."
    parser = ArgumentParser(prog="train.py", description=about, exit_on_error=False, allow_abbrev=False)
    parser.add_argument("--output_dir", type=str, required=True, help="The folder of the run to resume.")
    parser.add_argument("--ckpt_path", type=Literal["last"], required=True, help="last: the run's last.ckpt.")
    parser.add_argument("--quiet", type=bool | None, help="No progress bar, model summary or banners.")
    parser.add_argument("--data.data_dir", type=str | None, help="Where the data is now.")
    parser.add_argument("--data.num_workers", type=int | None, help="DataLoader worker processes.")
    others = set(inspect.signature(Trainer).parameters) - RESUMABLE_TRAINER
    parser.add_class_arguments(Trainer, nested_key=None, instantiate=False, skip=others)
    return parser


def resumed_record(argv: list[str]) -> Path:
    """The record of the run that ``argv`` resumes, refusing any flag a resume may not change and a record that is not
    the one its last.ckpt was trained with."""
    run_dir = Path(build_resume_parser().parse_args(argv).output_dir)
    record, last = run_dir / RUN_RECORD, run_dir / "checkpoints" / "last.ckpt"
    text = record.read_text(errors="replace") if record.is_file() else ""
    if last.is_file() and fingerprint(text) != read_checkpoint(last).get("record"):
        changed = f"{record} is not the record {last} was trained with (deleted, edited or damaged since)"
        raise UserError(f"{changed}: restore it from a copy of the run.")
    evaluated = (run_dir / "metrics.json").is_file() and not any(last.parent.glob("*.ckpt"))  # it has a record too
    if not last.is_file() and (not text or evaluated):  # else train.py says what kept weights, if any, can do
        raise UserError(f"{run_dir} holds no run to resume: run its own command again, without --ckpt_path last.")
    return record


def fingerprint(record_text: str) -> str | None:
    """What a run is, from its record: a hash of every option but those a resume may change (None: no record)."""
    with suppress(yaml.YAMLError):
        if isinstance(options := yaml.safe_load(record_text), dict):
            kept = {key: value for key, value in flat(options) if key.replace(".init_args.", ".") not in RESUMABLE}
            return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    return None


def flat(options: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """data: {init_args: {val_size: 5}} -> data.init_args.val_size: 5."""
    for key, value in options.items():
        yield from flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(f"{prefix}{key}", value)]


def refuse_finished_run(run_dir: Path, epochs_done: int, max_epochs: int | None) -> None:
    """A resumed run must have epochs left to train."""
    done = max_epochs is not None and epochs_done >= max_epochs >= 0
    if done and (epochs_done > max_epochs or (run_dir / "metrics.json").is_file()):
        longer = f"{resume_hint(run_dir)} --max_epochs {epochs_done + max(epochs_done, 1)}"
        raise UserError(f"{run_dir} has already finished {epochs_done} epochs: train it longer with `{longer}`.")


def resume_hint(run_dir: Path) -> str:
    """The command that resumes this run, for a shell: the program this one was started as."""
    program = sys.argv[0] if sys.argv else ""
    command = ["python", program if program.endswith("train.py") else "scripts/train.py"]
    if Path(program).resolve().parent == Path(__file__).resolve().parent:  # python -m <package>.core.train
        command = ["python", "-m", f"{__package__}.train"]
    elif program.endswith("-train"):  # the installed console command ([project.scripts])
        command = [Path(program).name]
    return shlex.join([*command, "--output_dir", str(run_dir.resolve()), "--ckpt_path", "last"])
