"""Predict with a trained checkpoint on files (which its data module's read_file reads) or, given none, on its
predict_dataloader. One row per input: its class and that class's probability, or "skipped" with the reason
("blank": a picture without a digit); as CSV on stdout, or written whole to --output (.csv or .json)."""

import csv
import io
import sys
import tempfile
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from .cli import USER_ERRORS, Parser
from .errors import UserError, run_main
from .evaluate import add_checkpoint_options, load_with_overrides
from .records import json_text, replaced
from .workarounds import lightning_notes_ignored

RUN_FILES = ("metrics.json", "metrics.csv", "preprocessing.json")  # what runs and exports write: their record


def build_parser() -> ArgumentParser:
    parser = Parser(prog="predict.py", description=__doc__, exit_on_error=False)
    parser.add_argument("inputs", type=str, nargs="*", help="Files or folders; none: its predict_dataloader.")
    add_checkpoint_options(parser)
    parser.add_argument("--output", type=Path | None, default=None, help="A .csv or .json; unset: CSV on stdout.")
    return parser


def read_inputs(inputs: list[str], data, shape: tuple) -> tuple[list[dict], list]:
    """A row per input and the samples of those that have some, in order. An input that cannot be read, or gives
    samples the model cannot take, is skipped with the reason; the rest still count."""
    can_read, sources = getattr(data, "can_read", lambda path: True), []  # each input's name, and its reader
    for entry in map(Path, inputs):  # a folder with no file to read is read itself: its row says why it failed
        files = sorted(p for p in entry.glob("*") if p.is_file() and can_read(p)) if entry.is_dir() else []
        sources += [(str(path), lambda path=path: data.read_file(path)) for path in files or [entry]]
    if not inputs:  # read here: Trainer.predict re-creates a data module's DataLoader, which not all allow
        data.prepare_data()  # Lightning's place for a download or a generated file
        data.setup("predict")
        batches = [batch[0] if isinstance(batch, list | tuple) else batch for batch in data.predict_dataloader()]
        sources = [("predict_dataloader", lambda: torch.cat(batches))]
    rows, samples = [], []
    for name, read in sources:
        try:
            got = read()
            if (size := tuple(getattr(got, "shape", ())))[1:] != shape:
                raise ValueError(f"read as a batch of shape {size}, where the model takes samples of shape {shape}")
        except Exception as error:  # one bad file (of any kind of damage) must not cost the others
            status = "blank" if getattr(error, "blank", False) else "skipped"  # blank: a picture without a digit
            rows.append({"input": name, "status": status, "note": str(error).strip()})
            print(f"Skipped {name}: {rows[-1]['note']}.", file=sys.stderr)
        else:
            rows += [{"input": f"{name}[{i}]" if len(got) > 1 else name, "status": "ok"} for i in range(len(got))]
            samples.append(got)
    return rows, samples


def predict(config: Namespace) -> None:
    if output := config.output:  # before any work
        if output.suffix not in (".csv", ".json") or output.name in RUN_FILES or output.is_dir():
            raise UserError(f"--output {output}: give a .csv or .json file of its own, not a run's record.")
        try:  # tried, not asked: os.access says yes to root even where nothing can be written (/proc)
            tempfile.TemporaryFile(dir=next(folder for folder in output.parents if folder.exists())).close()
        except OSError as error:
            raise UserError(f"--output {output} cannot be written: {error.strerror.lower()}.") from error
    model, data, _ = load_with_overrides(config)
    rows, samples = read_inputs(config.inputs, data, tuple(model.hparams.input_shape))
    if all(row["status"] == "skipped" for row in rows):
        raise UserError(f"No input could be read: pass files that {type(data).__name__}.read_file() reads, or none.")
    with lightning_notes_ignored():
        trainer = Trainer(accelerator=config.accelerator, devices=1, logger=False, enable_progress_bar=False)
    if predicted := [row for row in rows if row["status"] == "ok"]:  # none if every input is blank or skipped
        scores = torch.cat(trainer.predict(model, DataLoader(torch.cat(samples), data.hparams.batch_size)))
        for row, confidence, prediction in zip(predicted, *scores.max(dim=1), strict=True):
            row |= {"prediction": prediction.item(), "confidence": confidence.item()}
    rows = [dict.fromkeys(["input", "status", "prediction", "confidence", "note"]) | row for row in rows]
    csv.writer(text := io.StringIO(), lineterminator="\n").writerows([rows[0].keys(), *(row.values() for row in rows)])
    if output:
        with replaced(output) as file:  # whole or not at all, even if stopped
            file.write((json_text({"predictions": rows}) if output.suffix == ".json" else text.getvalue()).encode())
    print(f"Wrote {len(rows)} rows to {output}\n" if output else text.getvalue(), end="")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)
