"""Predict with a trained checkpoint: Lightning's predict loop over its data module's predict_dataloader, a CSV row
per sample with the columns its LightningModule's predict_step returns, on stdout or written whole to --output."""

import csv
import io
from contextlib import ExitStack
from pathlib import Path

import torch
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader  # only with_digit_photos

from .callbacks import FirstBatchCheck
from .checkpoints import CheckpointOptions, load_with_overrides
from .checks import no_batch
from .cli import Parser
from .errors import run_main
from .predict_files import read_inputs  # only with_digit_photos
from .records import replaced
from .workarounds import lightning_notes_ignored, predict_batches_as_made


class Rows(BasePredictionWriter):
    """predict_step's output as CSV rows, written as each batch is predicted (the predict set is never held whole):
    a dict of per-sample values, a column each, or a tensor, the column ``prediction``. The first column names each
    sample's input (``names``, else its place in the predict_dataloader)."""

    def __init__(self, write, names: list[str] | None = None) -> None:
        super().__init__("batch")
        self.write, self.names, self.count = write, names, 0

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        columns = prediction if isinstance(prediction, dict) else {"prediction": prediction}
        values = [value.tolist() if isinstance(value, torch.Tensor) else value for value in columns.values()]
        writer = csv.writer(text := io.StringIO(), lineterminator="\n")
        if not self.count:
            writer.writerow(["input", *columns])
        for row in zip(*values, strict=True):
            writer.writerow([self.names[self.count] if self.names else f"predict_dataloader[{self.count}]", *row])
            self.count += 1
        self.write(text.getvalue())


def build_parser() -> Parser:
    parser = Parser(description=__doc__, exit_on_error=False)
    parser.add_class_arguments(CheckpointOptions)
    # with_digit_photos:
    parser.add_argument("inputs", type=str, nargs="*", help="Files or folders; none: its predict_dataloader.")
    # end with_digit_photos
    parser.add_argument("--output", type=Path | None, default=None, help="A CSV file; unset: CSV on stdout.")
    parser.add_argument("--limit_predict_batches", type=int | float | None, help="Batches (default: all).")
    return parser


def predict(config: Namespace) -> None:
    model, data, _ = load_with_overrides(config)
    with ExitStack() as stack:
        file = config.output and stack.enter_context(replaced(config.output))  # whole or not at all, even if stopped
        rows = Rows(lambda text: file.write(text.encode()) if file else print(text, end="", flush=True))
        settings = {"accelerator": config.accelerator, "limit_predict_batches": config.limit_predict_batches}
        callbacks = [rows, FirstBatchCheck()]  # the samples of the first batch checked, as in the other stages
        trainer = Trainer(devices=1, logger=False, enable_progress_bar=False, callbacks=callbacks, **settings)
        predict_batches_as_made(data)
        what = {"datamodule": data}  # its predict_dataloader
        # with_digit_photos:
        if config.inputs:  # files its data module reads, each row named by its file
            rows.names, samples = read_inputs(data, config.inputs, model.example_input_array.shape[1:])
            what = {"dataloaders": DataLoader(samples, batch_size=data.hparams.batch_size)}
        # end with_digit_photos
        with lightning_notes_ignored():
            trainer.predict(model, **what, return_predictions=False)
        if not rows.count:
            raise no_batch(trainer, "predict")
    if file:
        print(f"Wrote {rows.count} rows to {config.output}")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(build_parser().parse_args(argv)), exiting=argv is None)
