"""Predict with a trained checkpoint: on files (where its data module can read them) or on the data module's own
``predict_dataloader``; a table, and every row to a .csv or .json.

Files go through the data module's ``read_file`` (the MNIST one reads pictures of digits of any size, colours
or polarity, folders of them, and IDX files). The model runs through ``Trainer.predict``. Each input gets one
row: a class and its probability, the class marked uncertain, "blank" for a file with nothing to predict, or
"skipped" with the reason.
"""

import csv
import logging
import sys
import tempfile
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import LightningDataModule, Trainer
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from .checkpoints import first_line, load_checkpoint
from .cli import USER_ERRORS, ReadableHelp, parse_command_line
from .devices import check_accelerator
from .errors import NothingToPredict, UserError, WriteError, run_main
from .records import write_json

OUTPUT_SUFFIXES = (".csv", ".json")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="predict.py", description=__doc__.splitlines()[0], exit_on_error=False, formatter_class=ReadableHelp
    )
    parser.add_argument(
        "inputs",
        type=str,
        nargs="*",
        help="Files or folders the data module reads (MNIST: pictures, IDX files); none: its predict_dataloader.",
    )
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output", type=str | None, default=None, help="Also write every row to a .csv or .json.")
    parser.add_argument(
        "--min_confidence", type=float, default=0.5, help="Below this probability a class is marked uncertain."
    )
    parser.add_argument("--max_rows", type=int, default=20, help="Rows shown in the table (all go to --output).")
    parser.add_argument("--quiet", type=bool, default=False, help="No table: only problems, on stderr.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    return parser


class Inputs:
    """What was read: each input's name, and either its model input or why it has none (blank or skipped)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.tensors: list[Tensor] = []  # model inputs, [n, *input_shape] per file
        self.rows_of_tensors: list[int] = []  # the row of each sample in ``tensors``, in order
        self.notes: dict[int, tuple[str, str]] = {}  # row -> (status, note) for inputs without a prediction

    def add_samples(self, names: list[str], samples: Tensor) -> None:
        self.rows_of_tensors += range(len(self.names), len(self.names) + len(names))
        self.names += names
        self.tensors.append(samples)

    def add_note(self, name: str, status: str, note: str) -> None:
        self.notes[len(self.names)] = (status, note)
        self.names.append(name)


def check_output(output: str | None) -> Path | None:
    """Refuse an --output that cannot be written, before any work."""
    if output is None:
        return None
    path = Path(output)
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UserError(f"--output {path}: use a file name ending in .csv or .json.")
    if path.is_dir():
        raise UserError(f"--output {path} is a folder; pass a file name ending in .csv or .json.")
    existing = next(parent for parent in path.parents if parent.exists())
    if not existing.is_dir():
        raise UserError(f"--output {path} cannot be written: {existing} is not a folder.")
    try:  # tried, not asked: os.access says yes to root even where nothing can be written (/proc)
        if path.exists():
            path.open("a").close()
        else:
            tempfile.TemporaryFile(dir=existing).close()
    except OSError as error:
        raise UserError(f"--output {path} cannot be written: {(error.strerror or str(error)).lower()}.") from error
    return path


def files_in(entry: Path, datamodule: LightningDataModule) -> tuple[list[Path], str | None]:
    """The files an input names, or why it names none."""
    if entry.is_dir():
        can_read = getattr(datamodule, "can_read", lambda path: True)
        everything = sorted(entry.iterdir())
        files = [path for path in everything if path.is_file() and can_read(path)]
        if files:
            return files, None
        folders = [path.name for path in everything if path.is_dir()]
        inside = f"; it holds the folders {', '.join(folders[:5])}: pass them (or their files) instead" * bool(folders)
        return [], f"the folder holds no file that {type(datamodule).__name__} reads{inside}"
    if entry.exists():
        return [entry], None
    return [], "no such file or folder"


def read_inputs(inputs: list[str], datamodule: LightningDataModule) -> Inputs:
    """Every input read, one file at a time: a file that fails is noted and skipped, and the rest still count."""
    read = Inputs()
    for entry in map(Path, inputs):
        files, problem = files_in(entry, datamodule)
        if problem:
            read.add_note(str(entry), "skipped", problem)
        for path in files:
            try:
                samples = datamodule.read_file(path)
            except NothingToPredict as error:
                read.add_note(str(path), "blank", str(error))
            except Exception as error:  # one bad file (of any kind of damage) must not cost the others
                read.add_note(str(path), "skipped", first_line(error))  # one line: a table row, a CSV cell
            else:
                names = [str(path)] if len(samples) == 1 else [f"{path}[{i}]" for i in range(len(samples))]
                read.add_samples(names, samples)
    return read


def read_predict_set(datamodule: LightningDataModule) -> Inputs:
    """The data module's own predict_dataloader, sample by sample; the samples are numbered as it gives them."""
    datamodule.setup("predict")
    read = Inputs()
    for batch in datamodule.predict_dataloader():
        samples = batch[0] if isinstance(batch, list | tuple) else batch
        first = len(read.names)
        read.add_samples([f"#{first + i}" for i in range(len(samples))], samples.cpu())
    return read


def predict(config: Namespace) -> list[dict]:
    output = check_output(config.output)
    if not 0 <= config.min_confidence <= 1:
        raise UserError(f"--min_confidence {config.min_confidence}: use a probability between 0 and 1.")
    if config.max_rows < 0:
        raise UserError(f"--max_rows {config.max_rows}: use 0 (no table rows, only the summary) or more.")
    check_accelerator(config.accelerator)
    checkpoint = load_checkpoint(config.ckpt_path)
    data = checkpoint.datamodule
    if config.inputs and not hasattr(data, "read_file"):
        raise UserError(
            f"{type(data).__name__}, the data module the model was trained with, cannot read files (it has no "
            "read_file method). Run predict.py without inputs to predict its predict_dataloader, or give it a "
            "read_file(path) that returns the model inputs a file holds."
        )
    read = read_inputs(config.inputs, data) if config.inputs else read_predict_set(data)
    for row, (status, note) in read.notes.items():
        if status == "skipped":
            print(f"Skipped {read.names[row]}: {note}.", file=sys.stderr)
    probabilities = run_model(checkpoint.model, read.tensors, data.hparams.batch_size, config.accelerator)
    if probabilities is None and not any(status == "blank" for status, _ in read.notes.values()):
        raise UserError(
            f"No input could be read, so there is nothing to predict. Pass files that {type(data).__name__} "
            "reads, or folders of them."
        )
    classes = checkpoint.model.hparams.num_classes
    rows = make_rows(read, probabilities, config.min_confidence, classes)
    if not config.quiet:
        print_table(rows, config.max_rows, config.min_confidence)
    if output:
        write_rows(rows, output, classes)
        if not config.quiet:
            print(f"Wrote {output}")
    return rows


def run_model(model, tensors: list[Tensor], batch_size: int, accelerator: str) -> Tensor | None:
    """Class probabilities [N, classes] for the stacked inputs, through Trainer.predict; None if there are none."""
    if not tensors or not sum(len(t) for t in tensors):
        return None
    batches = DataLoader(TensorDataset(torch.cat(tensors)), batch_size=batch_size)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the table the only output
    trainer = Trainer(
        accelerator=accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return torch.cat(trainer.predict(model, dataloaders=batches)).cpu()


def columns(classes: int) -> list[str]:
    return ["input", "status", "prediction", "confidence", *(f"p{c}" for c in range(classes)), "note"]


def make_rows(read: Inputs, probabilities: Tensor | None, min_confidence: float, classes: int) -> list[dict]:
    rows = [dict.fromkeys(columns(classes)) | {"input": name} for name in read.names]
    for row, (status, note) in read.notes.items():
        rows[row] |= {"status": status, "note": note}
    for row, p in zip(read.rows_of_tensors, probabilities if probabilities is not None else [], strict=True):
        confidence = float(p.max())
        uncertain = confidence < min_confidence
        rows[row] |= {"status": "uncertain" if uncertain else "ok", "prediction": int(p.argmax())}
        rows[row] |= {"confidence": confidence} | {f"p{c}": float(p[c]) for c in range(classes)}
        if uncertain:
            rows[row]["note"] = f"confidence below {min_confidence:g}"
    return rows


def print_table(rows: list[dict], max_rows: int, min_confidence: float) -> None:
    shown = rows[: max(max_rows, 0)]
    if shown:
        width = max(len("input"), *(len(row["input"]) for row in shown))
        print(f"{'input':<{width}}  class  confidence")
        for row in shown:
            if row["prediction"] is None:
                print(f"{row['input']:<{width}}  {row['status']}: {row['note']}")
            else:
                mark = "  uncertain" if row["status"] == "uncertain" else ""
                print(f"{row['input']:<{width}}  {row['prediction']:>5}  {row['confidence']:>10.4f}{mark}")
    if len(rows) > len(shown):
        more = len(rows) - len(shown)
        print(f"... and {more} more row{'s' * (more > 1)} (--max_rows; --output writes them all)")
    print(summary(rows, min_confidence))


def summary(rows: list[dict], min_confidence: float) -> str:
    count = {status: sum(row["status"] == status for row in rows) for status in ("ok", "uncertain", "blank", "skipped")}
    predicted = [row["prediction"] for row in rows if row["prediction"] is not None]
    per_class = ", ".join(f"{c}: {predicted.count(c)}" for c in sorted(set(predicted)))
    return (
        f"{len(rows)} inputs: {count['ok'] + count['uncertain']} predicted ({count['uncertain']} uncertain, "
        f"confidence < {min_confidence:g}), {count['blank']} blank, {count['skipped']} skipped."
        + (f" Classes {per_class}." if per_class else "")
    )


def write_rows(rows: list[dict], path: Path, classes: int) -> None:
    if path.suffix.lower() == ".json":
        write_json(path, {"predictions": rows})
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=columns(classes))
            writer.writeheader()
            writer.writerows(rows)
    except OSError as error:
        raise WriteError(path, error) from error


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(parse_command_line(build_parser(), argv)), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
