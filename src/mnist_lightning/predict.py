"""Predict digits for pictures (PNG, JPEG... any size, colours or polarity), folders of them, or IDX files.

Each picture goes through ``preprocessing.to_model_input``: its ink is told from the paper and the digit is
made the way MNIST made its own (cropped, scaled to 20 px, centred by mass on 28x28). IDX files already hold
MNIST digits and go in as they are. The model runs through ``Trainer.predict``. Each input gets one row: a
digit, a digit marked uncertain, "blank" for a picture with no ink, or "skipped" with the reason.
"""

import csv
import gzip
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets.mnist import read_image_file

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS, ReadableHelp, parse_command_line
from .data import normalize
from .devices import check_accelerator
from .errors import UserError, run_main
from .preprocessing import NoInkError, to_model_input
from .records import write_json

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
OUTPUT_SUFFIXES = (".csv", ".json")
PROBABILITIES = [f"p{digit}" for digit in range(10)]
COLUMNS = ["input", "status", "prediction", "confidence", *PROBABILITIES, "note"]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="predict.py", description=__doc__.splitlines()[0], exit_on_error=False, formatter_class=ReadableHelp
    )
    parser.add_argument("inputs", type=str, nargs="+", help="Image files, folders of images, or IDX files.")
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output", type=str | None, default=None, help="Also write every row to a .csv or .json.")
    parser.add_argument(
        "--min_confidence", type=float, default=0.5, help="Below this probability a digit is marked uncertain."
    )
    parser.add_argument("--max_rows", type=int, default=20, help="Rows shown in the table (all go to --output).")
    parser.add_argument("--quiet", type=bool, default=False, help="No table: only problems, on stderr.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    return parser


class Inputs:
    """What was read: each input's name, and either its model input or why it has none (blank or skipped)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.tensors: list[Tensor] = []  # normalized, [n, 1, 28, 28] per file
        self.rows_of_tensors: list[int] = []  # the row of each image in ``tensors``, in order
        self.notes: dict[int, tuple[str, str]] = {}  # row -> (status, note) for inputs without a prediction

    def add_images(self, names: list[str], images: Tensor) -> None:
        self.rows_of_tensors += range(len(self.names), len(self.names) + len(names))
        self.names += names
        self.tensors.append(images)

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
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problem = "not a folder" if not existing.is_dir() else "not writable"
        raise UserError(f"--output {path} cannot be written: {existing} is {problem}.")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"--output {path} cannot be written: the file is read-only.")
    return path


def is_idx(path: Path) -> bool:
    return "idx3" in path.name or path.suffix == ".idx"


def read_idx(path: Path) -> Tensor:
    """uint8 images [N, 28, 28] from an IDX image file (gzipped or not), parsed by torchvision."""
    if path.suffix != ".gz":
        return read_image_file(str(path))
    with tempfile.NamedTemporaryFile(suffix="-idx3-ubyte") as plain:
        plain.write(gzip.decompress(path.read_bytes()))
        plain.flush()
        return read_image_file(plain.name)


def read_picture(path: Path, mean: float, std: float) -> Tensor:
    """The model input [1, 28, 28] for one picture file. Pillow's errors pass through; NoInkError if blank."""
    with warnings.catch_warnings():
        # Pillow only warns between its pixel limit and twice it; such a file is refused like a larger one.
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(path) as image:
            return to_model_input(image, mean, std)


def why_unreadable(error: Exception) -> str:
    """What went wrong with a file, in the user's terms."""
    if isinstance(error, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return f"too large to decode safely, over Pillow's limit of {Image.MAX_IMAGE_PIXELS:,} pixels"
    if isinstance(error, UnidentifiedImageError):
        return "not an image that Pillow can read"
    if isinstance(error, OSError):
        return f"could not be read: {error}"
    return f"failed ({type(error).__name__}: {error})"


def files_in(entry: Path) -> tuple[list[Path], str | None]:
    """The files an input names, or why it names none."""
    if entry.is_dir():
        files = sorted(p for p in entry.iterdir() if p.is_file() and (p.suffix.lower() in IMAGE_SUFFIXES or is_idx(p)))
        if not files:
            return [], f"the folder holds no image ({', '.join(sorted(IMAGE_SUFFIXES))}) or IDX file"
        return files, None
    if entry.exists():
        return [entry], None
    return [], "no such file or folder"


def read_inputs(inputs: list[str], mean: float, std: float) -> Inputs:
    """Every input read, one file at a time: a file that fails is noted and skipped, and the rest still count."""
    read = Inputs()
    for entry in map(Path, inputs):
        files, problem = files_in(entry)
        if problem:
            read.add_note(str(entry), "skipped", problem)
        for path in files:
            try:
                if is_idx(path):
                    images = read_idx(path)
                    read.add_images([f"{path}[{i}]" for i in range(len(images))], normalize(images, mean, std))
                else:
                    read.add_images([str(path)], read_picture(path, mean, std).unsqueeze(0))
            except NoInkError as error:
                read.add_note(str(path), "blank", str(error))
            except Exception as error:  # one bad file (of any kind of damage) must not cost the others
                read.add_note(str(path), "skipped", why_unreadable(error))
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
    read = read_inputs(config.inputs, data.mean, data.std)
    for row, (status, note) in read.notes.items():
        if status == "skipped":
            print(f"Skipped {read.names[row]}: {note}.", file=sys.stderr)
    probabilities = run_model(checkpoint.model, read.tensors, data.hparams.batch_size, config.accelerator)
    if probabilities is None and not any(status == "blank" for status, _ in read.notes.values()):
        raise UserError(
            "No input could be read, so there is nothing to predict. Pass image files (PNG, JPEG, ...), folders "
            "of them, or IDX files."
        )
    rows = make_rows(read, probabilities, config.min_confidence)
    if not config.quiet:
        print_table(rows, config.max_rows, config.min_confidence)
    if output:
        write_rows(rows, output)
        if not config.quiet:
            print(f"Wrote {output}")
    return rows


def run_model(model, tensors: list[Tensor], batch_size: int, accelerator: str) -> Tensor | None:
    """Class probabilities [N, 10] for the stacked inputs, through Trainer.predict; None if there are none."""
    if not tensors:
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


def make_rows(read: Inputs, probabilities: Tensor | None, min_confidence: float) -> list[dict]:
    rows = [dict.fromkeys(COLUMNS) | {"input": name} for name in read.names]
    for row, (status, note) in read.notes.items():
        rows[row] |= {"status": status, "note": note}
    for row, p in zip(read.rows_of_tensors, probabilities if probabilities is not None else [], strict=True):
        confidence = float(p.max())
        uncertain = confidence < min_confidence
        rows[row] |= {"status": "uncertain" if uncertain else "ok", "prediction": int(p.argmax())}
        rows[row] |= {"confidence": confidence} | {name: float(p[d]) for d, name in enumerate(PROBABILITIES)}
        if uncertain:
            rows[row]["note"] = f"confidence below {min_confidence:g}"
    return rows


def print_table(rows: list[dict], max_rows: int, min_confidence: float) -> None:
    shown = rows[: max(max_rows, 0)]
    if shown:
        width = max(len("input"), *(len(row["input"]) for row in shown))
        print(f"{'input':<{width}}  digit  confidence")
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
    digits = [row["prediction"] for row in rows if row["prediction"] is not None]
    per_digit = ", ".join(f"{d}: {digits.count(d)}" for d in range(10) if digits.count(d))
    return (
        f"{len(rows)} inputs: {count['ok'] + count['uncertain']} predicted ({count['uncertain']} uncertain, "
        f"confidence < {min_confidence:g}), {count['blank']} blank, {count['skipped']} skipped."
        + (f" Digits {per_digit}." if per_digit else "")
    )


def write_rows(rows: list[dict], path: Path) -> None:
    if path.suffix.lower() == ".json":
        write_json(path, {"predictions": rows})
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(parse_command_line(build_parser(), argv)), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
