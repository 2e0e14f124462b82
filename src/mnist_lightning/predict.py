"""Predict digits for images (PNG, JPG... any size or colour), folders of them, or IDX files, via Trainer.predict.

Each image becomes what MNIST looks like: 8-bit grayscale, a light digit on a dark background (inverted when
the background is light), scaled to fit 20x20 and centred on 28x28.
"""

import csv
import gzip
import logging
import sys
import tempfile
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset
from torchvision.datasets.mnist import read_image_file

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS
from .data import normalize
from .devices import check_accelerator
from .errors import UserError, run_main
from .records import write_json

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="predict.py", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", type=str, nargs="+", help="Image files, folders of images, or IDX files.")
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output", type=str | None, default=None, help="Also write the table to a .csv or .json.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    return parser


def to_mnist(image: Image.Image) -> Tensor:
    """A picture as an MNIST-style uint8 [28, 28] tensor."""
    if image.mode in ("RGBA", "LA", "P"):  # transparent parts read as white paper
        image = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA"))
    gray = ImageOps.grayscale(image)
    border = [gray.getpixel((x, y)) for x in range(gray.width) for y in (0, gray.height - 1)]
    if sum(border) / len(border) > 127:  # MNIST digits are light on dark; most drawings are the reverse
        gray = ImageOps.invert(gray)
    gray.thumbnail((20, 20), Image.Resampling.LANCZOS)
    canvas = Image.new("L", (28, 28), 0)
    canvas.paste(gray, ((28 - gray.width) // 2, (28 - gray.height) // 2))
    return torch.frombuffer(bytearray(canvas.tobytes()), dtype=torch.uint8).reshape(28, 28)


def read_idx(path: Path) -> Tensor:
    """uint8 images [N, 28, 28] from an IDX image file (gzipped or not), parsed by torchvision."""
    if path.suffix != ".gz":
        return read_image_file(str(path))
    with tempfile.NamedTemporaryFile(suffix="-idx3-ubyte") as plain:
        plain.write(gzip.decompress(path.read_bytes()))
        plain.flush()
        return read_image_file(plain.name)


def is_idx(path: Path) -> bool:
    return "idx3" in path.name or path.suffix == ".idx"


def read_inputs(inputs: list[str]) -> tuple[list[str], Tensor | None, list[str]]:
    """Names and images of every readable input; a sentence for each input that could not be used."""
    names, images, problems = [], [], []
    for entry in map(Path, inputs):
        if entry.is_dir():
            files = sorted(p for p in entry.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES or is_idx(p))
            if not files:
                problems.append(f"{entry}: the folder holds no image ({', '.join(sorted(IMAGE_SUFFIXES))}) or IDX file")
        elif entry.exists():
            files = [entry]
        else:
            problems.append(f"{entry}: no such file or folder")
            files = []
        for path in files:
            try:
                if is_idx(path):
                    batch = read_idx(path)
                    names += [f"{path}[{i}]" for i in range(len(batch))]
                    images.append(batch)
                else:
                    with Image.open(path) as image:
                        images.append(to_mnist(image).unsqueeze(0))
                    names.append(str(path))
            except (UnidentifiedImageError, OSError, RuntimeError, AssertionError, ValueError) as error:
                problems.append(f"{path}: not a readable image or IDX image file ({type(error).__name__})")
    return names, (torch.cat(images) if images else None), problems


def predict(config: Namespace) -> list[dict]:
    check_accelerator(config.accelerator)
    checkpoint = load_checkpoint(config.ckpt_path)
    names, images, problems = read_inputs(config.inputs)
    for problem in problems:
        print(f"Skipped {problem}.", file=sys.stderr)
    if images is None:
        raise UserError(
            "No input could be read, so there is nothing to predict. Pass PNG/JPG files, folders, or IDX files."
        )
    inputs = normalize(images, checkpoint.datamodule.mean, checkpoint.datamodule.std)
    batches = DataLoader(TensorDataset(inputs), batch_size=checkpoint.datamodule.hparams.batch_size)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the table the only output
    trainer = Trainer(
        accelerator=config.accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    probabilities = torch.cat(trainer.predict(checkpoint.model, dataloaders=batches)).cpu()
    rows = [
        {"input": name, "prediction": int(p.argmax()), "confidence": float(p.max())}
        | {f"p{digit}": float(p[digit]) for digit in range(10)}
        for name, p in zip(names, probabilities, strict=True)
    ]
    print_table(rows)
    if config.output:
        write_rows(rows, Path(config.output))
    return rows


def print_table(rows: list[dict]) -> None:
    width = max(len("input"), *(len(row["input"]) for row in rows))
    print(f"{'input':<{width}}  digit  confidence")
    for row in rows:
        print(f"{row['input']:<{width}}  {row['prediction']:>5}  {row['confidence']:>10.4f}")


def write_rows(rows: list[dict], path: Path) -> None:
    if path.suffix == ".json":
        write_json(path, {"predictions": rows})
    elif path.suffix == ".csv":
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        raise UserError(f"--output {path}: use a file name ending in .csv or .json.")
    print(f"Wrote {path}")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: predict(build_parser().parse_args(argv)), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
