"""Predict with a trained checkpoint on files (which its data module's read_file reads) or, given none, on its
predict_dataloader. One row per input: its class and that class's probability, or "skipped" with the reason; as CSV
on stdout, or written whole to --output (as JSON if its name ends in .json)."""

import csv
import io
import sys
from pathlib import Path

import torch
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from .cli import USER_ERRORS, Parser
from .errors import UserError, run_main
from .evaluate import CheckpointOptions, load_with_overrides
from .records import json_text, replaced


def build_parser() -> Parser:
    parser = Parser(description=__doc__, exit_on_error=False)
    parser.add_class_arguments(CheckpointOptions)
    parser.add_argument("inputs", type=str, nargs="*", help="Files or folders; none: its predict_dataloader.")
    parser.add_argument("--output", type=Path | None, default=None, help="A file; unset: CSV on stdout.")
    return parser


def predict(config: Namespace) -> None:
    """An input that cannot be read, or gives samples the model cannot take, is skipped with the reason; the rest
    still count."""
    model, data, _ = load_with_overrides(config)
    if config.inputs and not hasattr(data, "read_file"):
        name = type(data).__name__
        raise UserError(f"{name} reads no files (it has no read_file): predict without inputs, or add read_file to it.")
    can_read, paths = getattr(data, "can_read", lambda path: True), []
    for entry in map(Path, config.inputs):  # a folder with no file to read is read itself: its row says why it failed
        paths += sorted(path for path in entry.glob("*") if path.is_file() and can_read(path)) or [entry]
    if not paths:  # read here: Trainer.predict re-creates a data module's DataLoader, which not all allow
        data.prepare_data()  # Lightning's place for a download or a generated file
        data.setup("predict")
        batches = [batch[0] if isinstance(batch, list | tuple) else batch for batch in data.predict_dataloader()]
    rows, samples, shape = [], [], tuple(model.hparams.input_shape)
    for name in paths or ["predict_dataloader"]:
        try:
            got = data.read_file(name) if paths else torch.cat(batches)
            if got.shape[1:] != shape:  # (what has no shape is skipped too)
                raise ValueError(
                    f"read as a batch of shape {tuple(got.shape)}, where the model takes samples of shape {shape}"
                )
        except Exception as error:  # one bad file (of any kind of damage) must not cost the others
            note = str(error).strip()
            rows.append({"input": str(name), "status": "skipped", "prediction": None, "confidence": None, "note": note})
            print(f"Skipped {name}: {note}.", file=sys.stderr)
        else:
            rows += [{"input": f"{name}[{i}]" if len(got) > 1 else str(name), "status": "ok"} for i in range(len(got))]
            samples.append(got)
    if not samples:
        raise UserError(f"No input could be read: pass files that {type(data).__name__}.read_file() reads, or none.")
    trainer = Trainer(accelerator=config.accelerator, devices=1, logger=False, enable_progress_bar=False)
    scores = torch.cat(trainer.predict(model, DataLoader(torch.cat(samples), data.hparams.batch_size)))
    for row, probabilities in zip([row for row in rows if row["status"] == "ok"], scores, strict=True):
        row |= {"prediction": probabilities.argmax().item(), "confidence": probabilities.max().item(), "note": None}
    writer = csv.DictWriter(text := io.StringIO(), rows[0].keys(), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    if output := config.output:
        with replaced(output) as file:  # whole or not at all, even if stopped
            file.write((json_text({"predictions": rows}) if output.suffix == ".json" else text.getvalue()).encode())
    print(f"Wrote {len(rows)} rows to {output}\n" if output else text.getvalue(), end="")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)
