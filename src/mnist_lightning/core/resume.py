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

from .checkpoints import completed_epochs, read_checkpoint
from .errors import UserError
from .records import RUN_RECORD

# How long a run trains, where and how it shows progress, where its data is and how it is read: not what the run is.
RESUMABLE_TRAINER = {"max_epochs", "max_time", "accelerator", "devices", "num_nodes", "strategy", "callbacks"}
RESUMABLE_TRAINER |= {"enable_progress_bar", "enable_model_summary", "limit_test_batches"}
RESUMABLE = RESUMABLE_TRAINER | {"data.init_args.data_dir", "data.init_args.num_workers", "output_dir"}


def build_resume_parser() -> ArgumentParser:
    about = "Resume the run in --output_dir from its last.ckpt and config.yaml; only these options may change."
    parser = ArgumentParser(prog="train.py", description=about, exit_on_error=False, allow_abbrev=False)
    parser.add_argument("--output_dir", type=str, required=True, help="The folder of the run to resume.")
    parser.add_argument("--ckpt_path", type=Literal["last"], required=True, help="last: the run's last.ckpt.")
    parser.add_argument("--data.data_dir", type=str, help="Where the data is now.")
    parser.add_argument("--data.num_workers", type=int, help="DataLoader worker processes.")
    others = set(inspect.signature(Trainer).parameters) - RESUMABLE_TRAINER
    parser.add_class_arguments(Trainer, None, instantiate=False, skip=others)
    return parser


def resumed_record(argv: list[str]) -> Path:
    """The record of the run that ``argv`` resumes, refusing any flag a resume may not change and a record that is not
    the one its last.ckpt was trained with."""
    run_dir = Path(build_resume_parser().parse_args(argv).output_dir)
    record, last = run_dir / RUN_RECORD, run_dir / "checkpoints" / "last.ckpt"
    text = record.read_text(errors="replace") if record.is_file() else ""
    if last.is_file():
        if fingerprint(text) != read_checkpoint(last).get("record"):
            raise UserError(
                f"{record} is not the record {last} was trained with (deleted, edited or damaged since): "
                "restore it from a copy of the run."
            )
    elif any(last.parent.glob("*.ckpt")):
        raise UserError(f"{last} is gone: test (evaluate.py) or fine-tune (--ckpt_path) its other checkpoints.")
    elif not text or (run_dir / "metrics.json").is_file():  # else killed before its first checkpoint: started over
        raise UserError(f"{run_dir} holds no run to resume: run its own command again, without --ckpt_path last.")
    return record


def fingerprint(record_text: str) -> str | None:
    """What a run is, from its record: a hash of every option but those a resume may change (None: no record)."""
    with suppress(yaml.YAMLError):
        if isinstance(options := yaml.safe_load(record_text), dict):
            kept = {key: value for key, value in flat(options) if key not in RESUMABLE}
            return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    return None  # not a record: no checkpoint's fingerprint matches it


def flat(options: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mappings as dotted keys: data, init_args, val_size: 5 -> data.init_args.val_size: 5."""
    for key, value in options.items():
        yield from flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(f"{prefix}{key}", value)]


def refuse_finished_run(run_dir: Path, max_epochs: int | None) -> None:
    """A resumed run must have epochs left to train (and one that trained them all, its test left to do)."""
    done = completed_epochs(read_checkpoint(run_dir / "checkpoints" / "last.ckpt"))
    # Fewer epochs than done; as many, once tested (else the resume tests it).
    if max_epochs is not None and 0 <= max_epochs < done + (run_dir / "metrics.json").is_file():
        longer = f"{resume_hint(run_dir)} --max_epochs {2 * done}"
        raise UserError(f"{run_dir} has already finished {done} epochs: train it longer with `{longer}`.")


def resume_hint(run_dir: Path) -> str:
    """The command that resumes this run, for a shell: the train.py this one was started as."""
    script = sys.argv[0] if sys.argv[0].endswith("train.py") else "scripts/train.py"
    return shlex.join(["python", script, "--output_dir", str(run_dir.resolve()), "--ckpt_path", "last"])
