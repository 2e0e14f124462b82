#!/usr/bin/env python
"""Measure predict.py on pictures of MNIST test digits: accuracy per kind of picture, and throughput.

    python benchmarks/predict.py --data_dir data        # writes results/predict_cpu.json and results/predict_cpu.md

1. Accuracy per kind of picture: for each kind in tests/test_preprocessing.py (a scan, a phone photo, coloured
   ink, a tiny or a huge picture, transparency, a thin pen...), --per_kind test digits drawn at random are
   saved as picture files and read by predict.py. Beside each, the same digits in MNIST form (an IDX file of
   them, also through predict.py) and how often the two predictions agree.
2. MNIST's 10,000 test digits saved as 28x28 PNG files against the IDX file: accuracy of each, agreement.
3. Throughput of predict.py in images per second, whole command in this process (checkpoint loading and the
   Trainer included), best of --repeats: picture files of two kinds, and the 10,000-image IDX file.

Without --ckpt_path, a checkpoint is trained first with the defaults (scripts/train.py).
"""

import argparse
import csv
import io
import json
import platform
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the picture kinds are the tests' own

from helpers import write_idx  # noqa: E402
from test_preprocessing import KINDS, mnist_test_set  # noqa: E402

from mnist_lightning.core.predict import main as predict_main  # noqa: E402
from mnist_lightning.core.records import write_json  # noqa: E402
from mnist_lightning.core.train import main as train_main  # noqa: E402

RESULTS = Path(__file__).parent / "results"


KIND_NOTES = {name: " ".join(kind.__doc__.split()) for name, kind in KINDS.items()}


def write_pictures(folder: Path, pictures: list[Image.Image]) -> list[Path]:
    folder.mkdir(parents=True)
    paths = []
    for i, picture in enumerate(pictures):
        path = folder / f"{i:05d}{'.jpg' if picture.format == 'JPEG' else '.png'}"
        path.write_bytes(picture.file_bytes)
        paths.append(path)
    return paths


class Predicted:
    """What predict.py said of its inputs: the prediction of each row (``input``: a file, or ``file[i]`` of a file of
    several digits), in order, and the files it skipped (on stderr: ``Skipped PATH: REASON.``), by path."""

    def __init__(self, output: Path, said: str) -> None:
        rows = list(csv.DictReader(output.open()))
        self.by_input = {row["input"]: int(row["prediction"]) for row in rows}
        self.in_order = [int(row["prediction"]) for row in rows]
        lines = [line.removeprefix("Skipped ") for line in said.splitlines() if line.startswith("Skipped ")]
        self.skipped = dict(line.split(": ", 1) for line in lines)

    def of_files(self, paths: list[Path]) -> list[int | None]:
        """The prediction of each picture file (None: skipped, which counts as wrong)."""
        return [self.by_input.get(str(path)) for path in paths]


def predict(ckpt: str, inputs: list[Path], output: Path) -> tuple[Predicted, float]:
    """predict.py on ``inputs`` (its CSV output) and the seconds the whole command took."""
    said = io.StringIO()
    start = time.perf_counter()
    with redirect_stderr(said):
        code = predict_main(["--ckpt_path", ckpt, *map(str, inputs), "--output", str(output)])
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"predict.py failed with exit status {code}: {said.getvalue()[-3000:]}")
    return Predicted(output, said.getvalue()), seconds


def accuracy(predictions: list[int | None], labels: np.ndarray) -> float:
    return float(np.mean([predicted == label for predicted, label in zip(predictions, labels, strict=True)]))


def agreement(first: list[int | None], second: list[int | None]) -> float:
    return float(np.mean([a is not None and a == b for a, b in zip(first, second, strict=True)]))


def per_kind(args, ckpt: str, images: np.ndarray, labels: np.ndarray, work: Path) -> dict:
    kinds = {name: kind for name, kind in KINDS.items() if name != "mnist_png"}
    results = {}
    for number, (name, kind) in enumerate(kinds.items()):
        rng = np.random.default_rng(args.seed + number)
        chosen = rng.choice(len(images), args.per_kind, replace=False)
        paths = write_pictures(work / name, [kind(images[i], rng) for i in chosen])
        write_idx(work / f"{name}-idx3-ubyte", images[chosen])
        pictures, _ = predict(ckpt, paths, work / f"{name}.csv")
        from_pictures = pictures.of_files(paths)
        in_mnist_form = predict(ckpt, [work / f"{name}-idx3-ubyte"], work / f"{name}-idx.csv")[0].in_order
        results[name] = {
            "pictures": len(chosen),
            "accuracy": accuracy(from_pictures, labels[chosen]),
            "mnist_form_accuracy": accuracy(in_mnist_form, labels[chosen]),
            "agreement": agreement(from_pictures, in_mnist_form),
            "blank": sum(reason.startswith("blank:") for reason in pictures.skipped.values()),
        }
        print(f"{name}: {results[name]}", flush=True)
    return results


def png_against_idx(ckpt: str, images: np.ndarray, labels: np.ndarray, idx: Path, work: Path) -> dict:
    folder = work / "mnist_png"
    folder.mkdir()
    for i, digit in enumerate(images):
        Image.fromarray(digit).save(folder / f"{i:05d}.png")
    paths = [folder / f"{i:05d}.png" for i in range(len(images))]
    from_png = predict(ckpt, [folder], work / "png.csv")[0].of_files(paths)
    from_idx = predict(ckpt, [idx], work / "idx.csv")[0].in_order
    return {
        "digits": len(images),
        "png_accuracy": accuracy(from_png, labels),
        "idx_accuracy": accuracy(from_idx, labels),
        "agreement": agreement(from_png, from_idx),
    }


def throughput(args, ckpt: str, images: np.ndarray, idx: Path, work: Path) -> dict:
    rng = np.random.default_rng(args.seed)
    cases = {}
    for name, count in (("scan", 400), ("phone_photo", 100)):
        chosen = rng.choice(len(images), count, replace=False)
        cases[f"{name} files"] = write_pictures(work / f"speed_{name}", [KINDS[name](images[i], rng) for i in chosen])
    cases["IDX file (t10k-images-idx3-ubyte.gz)"] = [idx]
    results = {}
    for name, inputs in cases.items():
        runs = []
        for _ in range(args.repeats):
            predicted, seconds = predict(ckpt, inputs, work / "speed.csv")
            runs.append(seconds)
        count = len(predicted.in_order)
        results[name] = {"images": count, "seconds": runs, "images_per_second": count / min(runs)}
        print(f"{name}: {results[name]['images_per_second']:.0f} images/s", flush=True)
    return results


def markdown(result: dict) -> str:
    lines = [
        f"predict.py on pictures of MNIST test digits; checkpoint test accuracy {result['checkpoint_test_acc']:.2%}",
        "",
        "| kind of picture | pictures | accuracy | same digits in MNIST form | difference | agreement |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["per_kind"].items():
        difference = 100 * (row["accuracy"] - row["mnist_form_accuracy"])
        lines.append(
            f"| {name} | {row['pictures']} | {row['accuracy']:.2%} | {row['mnist_form_accuracy']:.2%} | "
            f"{difference:+.1f} | {row['agreement']:.1%} |"
        )
    total = result["photo_like_total"]
    lines.append(
        f"| **all kinds** | {total['pictures']} | {total['accuracy']:.2%} | {total['mnist_form_accuracy']:.2%} "
        f"| {100 * (total['accuracy'] - total['mnist_form_accuracy']):+.1f} | {total['agreement']:.1%} |"
    )
    png = result["png_against_idx"]
    lines += [
        "",
        f"MNIST's {png['digits']:,} test digits as 28x28 PNG files: {png['png_accuracy']:.2%}; the IDX file: "
        f"{png['idx_accuracy']:.2%}; same prediction for {png['agreement']:.2%} of them.",
        "",
        "| predict.py on | images | images per second |",
        "|---|---|---|",
    ]
    for name, row in result["throughput"].items():
        lines.append(f"| {name} | {row['images']:,} | {row['images_per_second']:,.0f} |")
    lines += ["", "| kind | what |", "|---|---|"]
    lines += [f"| {name} | {KIND_NOTES[name]} |" for name in result["per_kind"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="Folder holding MNIST/raw/ (the four original files).")
    parser.add_argument("--ckpt_path", default=None, help="Default: train one with scripts/train.py's defaults.")
    parser.add_argument("--per_kind", type=int, default=400, help="Pictures of each kind.")
    parser.add_argument("--repeats", type=int, default=3, help="Throughput: best of this many runs.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(RESULTS / "predict_cpu.json"))
    args = parser.parse_args()
    images, labels = mnist_test_set(args.data_dir)
    idx = Path(args.data_dir) / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    if not idx.exists():
        idx = idx.with_suffix("")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        ckpt = args.ckpt_path
        if ckpt is None:
            with redirect_stdout(io.StringIO()):
                assert (
                    train_main(
                        [
                            "--data.data_dir",
                            args.data_dir,
                            "--output_dir",
                            str(work / "run"),
                            "--enable_progress_bar",
                            "false",
                        ]
                    )
                    == 0
                )
            ckpt = json.loads((work / "run" / "metrics.json").read_text())["best_checkpoint"]
        test_predictions = predict(ckpt, [idx], work / "test.csv")[0].in_order
        result = {
            "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
            "command": "python benchmarks/predict.py " + " ".join(sys.argv[1:]),
            "checkpoint_test_acc": accuracy(test_predictions, labels),
            "per_kind": per_kind(args, ckpt, images, labels, work),
        }
        photo_like = list(result["per_kind"].values())
        pictures = sum(row["pictures"] for row in photo_like)
        result["photo_like_total"] = {"pictures": pictures} | {
            measure: sum(row[measure] * row["pictures"] for row in photo_like) / pictures
            for measure in ("accuracy", "mnist_form_accuracy", "agreement")
        }
        result["png_against_idx"] = png_against_idx(ckpt, images, labels, idx, work)
        result["throughput"] = throughput(args, ckpt, images, idx, work)
    write_json(args.output, result)
    table = markdown(result)
    Path(args.output).with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
