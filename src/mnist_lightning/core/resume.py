"""Resuming a run: ``train.py --output_dir RUN --ckpt_path last`` goes on from RUN's last.ckpt with the options of
RUN's config.yaml. What may change between a run's segments (RESUMABLE) may be given anew; any other option may be
given with its recorded value (the run's own command with ``--ckpt_path last`` added resumes it), and one that would
change what the run is is refused. Every checkpoint keeps a fingerprint of the record it was trained with and the
number of processes it was trained in, so a record edited, damaged or written by another version of the template,
or a resume whose batches would be split otherwise, is refused before anything is written."""

import hashlib
import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

from .checkpoints import completed_epochs, read_checkpoint
from .errors import UserError
from .records import RUN_RECORD

# How long a run trains, where and how it shows progress, where its data is and how it is read: not what the run is.
RESUMABLE_TRAINER = {"max_epochs", "max_time", "accelerator", "devices", "num_nodes", "strategy", "callbacks"}
RESUMABLE_TRAINER |= {"enable_progress_bar", "enable_model_summary", "limit_test_batches"}
RESUMABLE = RESUMABLE_TRAINER | {"data.init_args.data_dir", "data.init_args.num_workers", "output_dir"}


def resumed_record(run_dir: Path) -> Path:
    """The record of the run in ``run_dir``, refused if it is not the one its last.ckpt was trained with."""
    record, last = run_dir / RUN_RECORD, run_dir / "checkpoints" / "last.ckpt"
    text = record.read_text(errors="replace") if record.is_file() else ""
    if last.is_file():
        if (trained := read_checkpoint(last).get("record")) != fingerprint(text):
            cause = (
                "it was made by an earlier version of this template, whose checkpoints keep no fingerprint of it"
                if trained is None
                else "it was deleted, edited or damaged since, or written by another version of this template"
            )
            ways = "resume it with the version that made it, or start a new run from its weights"
            raise UserError(
                f"{record} is not the record {last} was trained with: {cause}. Restore it, {ways}: "
                f"{command()} --ckpt_path {last}"
            )
    elif kept := sorted(last.parent.glob("*.ckpt")):
        newest = shlex.quote(str(max(kept, key=lambda path: path.stat().st_mtime).resolve()))
        raise UserError(
            f"{last} is gone, so the run cannot be resumed; it keeps {', '.join(path.name for path in kept)}. Test "
            f"one with: {command('evaluate')} --ckpt_path {newest}; or start a new run from its weights: "
            f"{command()} --ckpt_path {newest}"
        )
    elif not text or (run_dir / "metrics.json").is_file():  # else killed before its first checkpoint: started over
        raise UserError(f"{run_dir} holds no run to resume: run its own command again, without --ckpt_path last.")
    return record


def refuse_changes(options: dict, record: Path) -> None:
    """A resume whose options (``options``: the record with the command line's over it) would change what the run
    is: refused, naming each option changed with its recorded and its given value."""
    recorded = dict(flat(yaml.safe_load(record.read_text())))
    changed = [
        f"--{key.replace('.init_args', '')} from {recorded[key]!r} to {value!r}"
        for key, value in flat(options)
        if key not in {*RESUMABLE, "ckpt_path"} and key in recorded and value != recorded[key]
    ]
    if changed:
        may = ", ".join(f"--{key.replace('.init_args', '')}" for key in sorted(RESUMABLE))
        last = record.parent / "checkpoints" / "last.ckpt"
        raise UserError(
            f"A resume cannot change {'; '.join(changed)}: that would make the run a mix of two. It may change {may}."
            f" To train with other options, start a new run from its weights: {command()} --ckpt_path {last}"
        )


def check_processes(trained: dict[str, Any], world_size: int) -> None:
    """A resume in as many processes as the run (--devices times --num_nodes): in another number, each epoch would
    have another number of steps, and the run's schedule and step counts (kept in steps) would no longer fit it."""
    if (before := trained.get("world_size", world_size)) != world_size:
        raise UserError(
            f"The run was trained in {before} process(es) (--devices times --num_nodes), this resume would run "
            f"{world_size}: its epochs would have another number of steps, which its learning-rate schedule and step "
            f"counts do not follow. Resume with --devices and --num_nodes that make {before}, or start a new run from "
            "its weights with --ckpt_path."
        )


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


def command(script: str = "train") -> str:
    """The command of ``script`` (train, evaluate...) as the user runs train.py, for a shell: installed commands by
    their names, else the scripts beside the train.py it was started as (scripts/ from elsewhere, a notebook say), with
    the PYTHONPATH its modules were found on."""
    if (program := sys.argv[0]).endswith("train.py"):
        words = ["python", program.removesuffix("train.py") + f"{script}.py"]
    elif Path(program).name == "mnist-lightning-train":  # the console command that installing the project makes
        words = [f"mnist-lightning-{script}"]
    else:  # (a notebook, say)
        words = ["python", f"scripts/{script}.py"]
    path = os.environ.get("PYTHONPATH")
    return shlex.join(words) if not path else f"PYTHONPATH={shlex.quote(path)} {shlex.join(words)}"


def resume_hint(run_dir: Path) -> str:
    """The command that resumes this run."""
    return f"{command()} {shlex.join(['--output_dir', str(run_dir.resolve()), '--ckpt_path', 'last'])}"
