"""Predict with a trained checkpoint on files (which its data module's read_file reads) or on its own
predict_dataloader. One row per input: a class and its probability, or "blank" (nothing to predict) or
"skipped" with the reason; a table, and every row to a .csv or .json."""

import csv
import io
import logging
import sys
import tempfile
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader

from .cli import USER_ERRORS, Parser
from .devices import check_gpu
from .errors import UserError, run_main
from .evaluate import add_checkpoint_options, load_with_overrides
from .records import json_text, replaced
from .workarounds import lightning_notes_ignored

RUN_FILES = ("metrics.json", "metrics.csv", "preprocessing.json")  # what runs and exports write: their record


def build_parser() -> ArgumentParser:
    parser = Parser(prog="predict.py", description=__doc__, exit_on_error=False)
    parser.add_argument("inputs", type=str, nargs="*", help="Files or folders; none: its predict_dataloader.")
    add_checkpoint_options(parser)
    parser.add_argument("--output", type=Path | None, default=None, help="Also write every row to a .csv or .json.")
    parser.add_argument("--min_confidence", type=ClosedUnitInterval, default=0.5, help="Under it a class is uncertain.")
    parser.add_argument("--max_rows", type=NonNegativeInt, default=20, help="Rows shown (all go to --output).")
    parser.add_argument("--quiet", type=bool, default=False, help="No table: only problems, on stderr.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    return parser


def check_output(path: Path) -> None:
    """Before any work: a .csv or .json of its own (not a run's record) that can be written."""
    if path.suffix.lower() not in (".csv", ".json") or path.name in RUN_FILES:
        raise UserError(f"--output {path}: give a .csv or .json file of its own (not {', '.join(RUN_FILES)}).")
    folder = next(p for p in (path, *path.parents) if p.exists())
    try:  # tried, not asked: os.access says yes to root even where nothing can be written (/proc)
        path.open("a").close() if folder == path else tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise UserError(f"--output {path} cannot be written: {error.strerror.lower()}.") from error


def read_inputs(inputs: list[str], data, shape: tuple) -> tuple[list[dict], list]:
    """A row per input (with status and note where it has no prediction) and the samples of the others, in order.
    A file that fails, or gives samples the model cannot take, is skipped with the reason; the rest still count."""
    if not inputs:  # read here: Trainer.predict re-creates a data module's DataLoader, which not all allow
        data.prepare_data()  # Lightning's place for a download or a generated file
        data.setup("predict")
        batches = [batch[0] if isinstance(batch, list | tuple) else batch for batch in data.predict_dataloader()]
        samples = [sample for batch in batches for sample in batch]
        if wrong := sample_problem(samples, shape):
            raise UserError(f"{type(data).__name__}.predict_dataloader() gives {wrong}.")
        return [{"input": f"#{i}"} for i in range(len(samples))], samples
    rows, samples, can_read = [], [], getattr(data, "can_read", lambda path: True)
    for entry in map(Path, inputs):
        files = sorted(p for p in entry.glob("*") if p.is_file() and can_read(p)) if entry.is_dir() else [entry]
        if not files:
            rows.append({"input": str(entry), "status": "skipped", "note": "no file in it that can be read"})
        for path in files:
            try:
                read = data.read_file(path)
                if wrong := sample_problem(read, shape):
                    raise ValueError(f"read_file() gives {wrong}")
            except Exception as error:  # one bad file (of any kind of damage) must not cost the others
                status = "blank" if getattr(error, "blank", False) else "skipped"  # a picture without a digit
                rows.append({"input": str(path), "status": status, "note": str(error).strip()})
            else:
                rows += [{"input": f"{path}[{i}]" if len(read) > 1 else str(path)} for i in range(len(read))]
                samples += list(read)
    return rows, samples


def sample_problem(samples, shape: tuple) -> str | None:
    """What is wrong with the first of ``samples`` that the model cannot take, or None."""
    for sample in samples:
        if getattr(sample, "shape", None) != shape:
            got = f"of shape {tuple(sample.shape)}" if hasattr(sample, "shape") else f"of type {type(sample).__name__}"
            return f"a sample {got}, where the model takes samples of shape {shape}"
    return None


def predict(config: Namespace) -> list[dict]:
    if config.output:
        check_output(config.output)
    check_gpu(config.accelerator)
    model, data, _ = load_with_overrides(config)
    rows, samples = read_inputs(config.inputs, data, tuple(model.hparams.input_shape))
    for row in rows:
        if row.get("status") == "skipped":
            print(f"Skipped {row['input']}: {row['note']}.", file=sys.stderr)
    if all(row.get("status") == "skipped" for row in rows):
        raise UserError(
            f"No input could be read: pass files that {type(data).__name__}.read_file() reads, or no files to "
            "predict its predict_dataloader()."
        )
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the table the only output
    with lightning_notes_ignored():
        trainer = Trainer(accelerator=config.accelerator, devices=1, logger=False, enable_progress_bar=False)
    batches = trainer.predict(model, DataLoader(samples, data.hparams.batch_size)) if samples else []
    probabilities = [f"p{c}" for c in range(model.hparams.num_classes)]
    columns = ["input", "status", "prediction", "confidence", *probabilities, "note"]
    scores = iter([p for batch in batches for p in batch.tolist()])
    for i, row in enumerate(rows):
        if "status" not in row:
            p = next(scores)
            row |= {"status": "ok" if max(p) >= config.min_confidence else "uncertain", "prediction": p.index(max(p))}
            row |= {"confidence": max(p), **dict(zip(probabilities, p, strict=True))}
        rows[i] = dict.fromkeys(columns) | row
    if not config.quiet:
        print_table(rows, config.max_rows)
    if config.output:
        text = io.StringIO()
        if config.output.suffix.lower() == ".json":
            text.write(json_text({"predictions": rows}))
        else:
            csv.writer(text).writerows([rows[0].keys(), *(row.values() for row in rows)])
        with replaced(config.output) as file:  # whole or not at all, even if stopped
            file.write(text.getvalue().encode())
    return rows


def print_table(rows: list[dict], max_rows: int) -> None:
    width = max(len(row["input"]) for row in [{"input": "input"}, *rows[:max_rows]])
    print(f"{'input':<{width}}  class  confidence")
    for row in rows[:max_rows]:
        scored = f"{row['prediction']:>5}  {row['confidence']:>10.4f}" if row["prediction"] is not None else ""
        note = f"{row['status']}: {row['note']}" if row["note"] else row["status"] * (row["status"] == "uncertain")
        print(f"{row['input']:<{width}}  {scored}  {note}".rstrip())
    if len(rows) > max_rows:
        print(f"... and {len(rows) - max_rows} more rows (--max_rows; --output writes them all)")
    count = [row["status"] for row in rows].count
    print(
        f"{len(rows)} inputs: {count('ok') + count('uncertain')} predicted ({count('uncertain')} uncertain), "
        f"{count('blank')} blank, {count('skipped')} skipped."
    )


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
