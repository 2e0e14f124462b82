"""Predict with a trained checkpoint on files (which its data module's read_file reads) or on its own
predict_dataloader. One row per input: a class and its probability, or "blank" (nothing to predict) or
"skipped" with the reason; a table, and every row to a .csv or .json."""

import csv
import io
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor
from torch.utils.data import DataLoader

from .cli import USER_ERRORS, Parser
from .devices import check_gpu
from .errors import UserError, run_main
from .evaluate import add_checkpoint_options, load_with_overrides
from .records import RUN_RECORD, replaced, write_json
from .workarounds import lightning_notes_ignored


def build_parser() -> ArgumentParser:
    parser = Parser(prog="predict.py", description=__doc__, exit_on_error=False)
    parser.add_argument(
        "inputs", type=str, nargs="*", help="Files or folders, or none at all: the data module's predict_dataloader."
    )
    add_checkpoint_options(parser)
    parser.add_argument("--output", type=Path | None, default=None, help="Also write every row to a .csv or .json.")
    parser.add_argument("--min_confidence", type=ClosedUnitInterval, default=0.5, help="Under it a class is uncertain.")
    parser.add_argument("--max_rows", type=NonNegativeInt, default=20, help="Rows shown (all go to --output).")
    parser.add_argument("--quiet", type=bool, default=False, help="No table: only problems, on stderr.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    return parser


RUN_FILES = ("metrics.json", "logs", "tensorboard", "checkpoints")  # in a run's folder, what its commands wrote


def check_output(path: Path) -> None:
    if path.suffix.lower() not in (".csv", ".json"):
        raise UserError(f"--output {path}: use a file name ending in .csv or .json.")
    # What a run wrote (its metrics.json, logs, exports' preprocessing.json) is its record: predictions go beside it.
    run = next((p for p in path.resolve().parents[:4] if (p / RUN_RECORD).is_file()), None)
    if run and path.exists() and path.resolve().relative_to(run).parts[0] in RUN_FILES:
        raise UserError(
            f"--output {path} is a file of the run in {run}, which predictions would replace. Give a file of their "
            f"own, e.g. --output {run / 'predictions.csv'}."
        )
    try:  # tried, not asked: os.access says yes to root even where nothing can be written (/proc)
        if path.exists():
            path.open("a").close()
        else:
            tempfile.TemporaryFile(dir=next(parent for parent in path.parents if parent.exists())).close()
    except OSError as error:
        raise UserError(f"--output {path} cannot be written: {error.strerror.lower()}.") from error


def read_files(inputs: list[str], data, shape: tuple) -> tuple[list[dict], list]:
    """A row per input (with status and note where it has no prediction) and the samples of the others, in order.
    A file that fails, or gives samples the model cannot take, is skipped with the reason; the rest still count."""
    if not hasattr(data, "read_file"):
        raise UserError(
            f"{type(data).__name__}, the data module the model was trained with, cannot read files (it has no "
            "read_file method): run predict.py without inputs to predict its predict_dataloader, or give it a "
            "read_file(path)."
        )
    rows, samples = [], []
    can_read = getattr(data, "can_read", lambda path: True)
    for entry in map(Path, inputs):
        files = [entry] if entry.is_file() else sorted(p for p in entry.glob("*") if p.is_file() and can_read(p))
        if not files:
            empty = f"the folder holds no file that {type(data).__name__} reads (folders in it are not searched)"
            rows.append({"input": str(entry), "status": "skipped", "note": empty if entry.is_dir() else "no such file"})
        for path in files:
            try:
                read = data.read_file(path)
            except Exception as error:  # one bad file (of any kind of damage) must not cost the others
                status = "blank" if getattr(error, "blank", False) else "skipped"  # a picture without a digit
                rows.append({"input": str(path), "status": status, "note": str(error).strip()})
            else:
                if wrong := sample_problem(read, shape):
                    rows.append({"input": str(path), "status": "skipped", "note": f"read_file() gives {wrong}"})
                    continue
                rows += [{"input": str(path) if len(read) == 1 else f"{path}[{i}]"} for i in range(len(read))]
                samples += list(read)
    return rows, samples


def read_loader(data, shape: tuple, ckpt_path: str) -> tuple[list[dict], list]:
    """Read here: Trainer.predict re-creates a data module's DataLoader, which not every DataLoader allows."""
    name = type(data).__name__
    if not is_overridden("predict_dataloader", data, LightningDataModule):
        files = "pass files that it reads" if hasattr(data, "read_file") else "give it a read_file(path) and pass files"
        raise UserError(
            f"{name}, the data module the model was trained with, has no predict_dataloader, so predict.py without "
            f"inputs has nothing to predict. Define predict_dataloader() in {name} to return the samples to predict, "
            f"or {files}: python scripts/predict.py FILE_OR_FOLDER ... --ckpt_path {ckpt_path}."
        )
    data.prepare_data()  # Lightning's place for a download or a generated file (not needed to read inputs)
    data.setup("predict")
    loader = data.predict_dataloader()
    batches = [batch[0] if isinstance(batch, list | tuple) else batch for batch in loader]
    samples = [sample for batch in batches for sample in batch]
    if wrong := sample_problem(samples, shape):
        raise UserError(
            f"The data module {name} does not give what it says (input_shape {shape}): its predict_dataloader() gives "
            f"{wrong}. Fix predict_dataloader() or what {name} says."
        )
    return [{"input": f"#{i}"} for i in range(len(samples))], samples


def sample_problem(samples: list, shape: tuple) -> str | None:
    """What is wrong with the first of ``samples`` that the model cannot take, or None."""
    wrong = next((sample for sample in samples if not isinstance(sample, Tensor) or sample.shape != shape), None)
    if wrong is None:
        return None
    got = f"of shape {tuple(wrong.shape)}" if isinstance(wrong, Tensor) else f"that is a {type(wrong).__name__}"
    return f"a sample {got}, where the model takes samples of shape {shape}"


def predict(config: Namespace) -> list[dict]:
    if config.output:
        check_output(config.output)
    check_gpu(config.accelerator)
    checkpoint = load_with_overrides(config)
    model, data, name = checkpoint.model, checkpoint.datamodule, type(checkpoint.datamodule).__name__
    shape = tuple(model.hparams.input_shape)
    rows, samples = (
        read_files(config.inputs, data, shape) if config.inputs else read_loader(data, shape, config.ckpt_path)
    )
    for row in rows:
        if row.get("status") == "skipped":
            print(f"Skipped {row['input']}: {row['note']}.", file=sys.stderr)
    probabilities = []
    if samples:
        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the table the only output
        options = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "devices": 1}
        with lightning_notes_ignored():
            trainer = Trainer(accelerator=config.accelerator, enable_model_summary=False, **options)
        batches = trainer.predict(model, DataLoader(samples, data.hparams.batch_size))
        probabilities = [p for batch in batches for p in batch.cpu()]
    if not probabilities and not any(row.get("status") == "blank" for row in rows):
        raise UserError(f"No input could be read, so there is nothing to predict: pass files that {name} reads.")
    for row, p in zip([row for row in rows if "status" not in row], probabilities, strict=True):
        uncertain = float(p.max()) < config.min_confidence
        row |= {"status": "uncertain" if uncertain else "ok", "prediction": int(p.argmax())}
        row |= {"confidence": float(p.max())} | {f"p{c}": float(value) for c, value in enumerate(p)}
        row["note"] = f"confidence below {config.min_confidence:g}" if uncertain else None
    columns = ["input", "status", "prediction", "confidence", *(f"p{c}" for c in range(model.hparams.num_classes))]
    rows = [dict.fromkeys([*columns, "note"]) | row for row in rows]
    if not config.quiet:
        print_table(rows, config.max_rows, config.min_confidence)
    if config.output and config.output.suffix.lower() == ".json":
        write_json(config.output, {"predictions": rows})
    elif config.output:  # written whole, as the .json is
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        with replaced(config.output) as file:
            file.write(text.getvalue().encode())
    if config.output and not config.quiet:
        print(f"Wrote {config.output}")
    return rows


def print_table(rows: list[dict], max_rows: int, min_confidence: float) -> None:
    width = max(len(row["input"]) for row in [{"input": "input"}, *rows[:max_rows]])
    if rows[:max_rows]:
        print(f"{'input':<{width}}  class  confidence")
    for row in rows[:max_rows]:
        scored = row["prediction"] is not None
        result = f"{row['prediction']:>5}  {row['confidence']:>10.4f}" if scored else f"{row['status']}: {row['note']}"
        print(f"{row['input']:<{width}}  {result}" + "  uncertain" * (row["status"] == "uncertain"))
    if (more := len(rows) - max_rows) > 0:
        print(f"... and {more} more row{'s' * (more > 1)} (--max_rows; --output writes them all)")
    count = Counter(row["status"] for row in rows)
    classes = sorted(Counter(row["prediction"] for row in rows if row["prediction"] is not None).items())
    print(
        f"{len(rows)} inputs: {count['ok'] + count['uncertain']} predicted ({count['uncertain']} uncertain, "
        f"confidence < {min_confidence:g}), {count['blank']} blank, {count['skipped']} skipped."
        + (f" Classes {', '.join(f'{c}: {n}' for c, n in classes)}." if classes else "")
    )


def main(argv: list[str] | None = None) -> int:
    config, started = None, time.time_ns()

    def run() -> None:
        nonlocal config
        config = build_parser().parse_args(argv)
        predict(config)

    def where() -> str:
        """What a stop left: --output is replaced whole or not at all, so it is this command's file or the earlier."""
        output = config and config.output
        if output and output.is_file() and output.stat().st_mtime_ns >= started:
            return f"{output} was written whole (every row) before it."
        return "no predictions were written" + (f" ({output} is as it was)." if output and output.exists() else ".")

    return run_main(run, USER_ERRORS, where=where, exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
