"""The MNIST example's predict.py on files (the digit-photos option): it reads the pictures people have, skips what it
cannot read saying why on stderr, and agrees with the IDX path; the export carries the same preprocessing.

With real MNIST (MNIST_DATA_DIR), photo-like pictures of test digits (test_preprocessing.KINDS) are read within
3 points of the same digits' accuracy in MNIST form (digits drawn with a thin or a medium pen, kind by kind),
and MNIST's own test digits saved as PNG get the IDX file's predictions.
"""

import csv
import gzip
import io
import json
import struct
import zlib
from pathlib import Path

import example
import numpy as np
import pytest
import torch
from helpers import FAKE_TEST, FAKE_VAL, TINY_RUN, one_line, write_idx
from PIL import Image
from test_preprocessing import KINDS, mnist_test_set, pixel_art, scan
from torchvision.datasets import MNIST

from mnist_lightning import datamodule as mnist_data  # (names a data module of one's own may lack: read in tests)
from mnist_lightning.core import export
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.predict import main
from mnist_lightning.core.train import main as train_main
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.digit_files import NothingToPredict, UnreadableFile
from mnist_lightning.preprocessing import STEPS, to_mnist_digit, to_model_input

pytestmark = [example.data, example.task]


def trained_checkpoint(data_dir: Path, run: Path, *flags: str) -> str:
    assert train_main(["--data.data_dir", str(data_dir), "--output_dir", str(run), *flags]) == 0
    return json.loads((run / "metrics.json").read_text())["best_checkpoint"]


@pytest.fixture(scope="module")
def fake_ckpt(fake_mnist, tmp_path_factory) -> str:
    return trained_checkpoint(fake_mnist, tmp_path_factory.mktemp("fake") / "run", *TINY_RUN)


@pytest.fixture(scope="module")
def real_ckpt(real_mnist, tmp_path_factory) -> str:
    return trained_checkpoint(real_mnist, tmp_path_factory.mktemp("real") / "run", "--enable_progress_bar", "false")


def predict(ckpt: str, *inputs, tmp_path: Path) -> list[dict]:
    """predict.py's rows for ``inputs``, read back from its CSV output: ``input``, ``prediction`` (an int) and
    ``confidence`` (a float); a file it skipped has no row."""
    output = tmp_path / "predictions.csv"
    assert main(["--ckpt_path", ckpt, *map(str, inputs), "--output", str(output)]) == 0
    rows = list(csv.DictReader(output.open()))
    assert not rows or list(rows[0]) == ["input", "prediction", "confidence"]
    return [row | {"prediction": int(row["prediction"]), "confidence": float(row["confidence"])} for row in rows]


def predictions_of(rows: list[dict], paths: list[Path]) -> list[int | None]:
    """The prediction for each picture file in ``paths`` (None: skipped, as blank or unreadable)."""
    by_input = {row["input"]: row["prediction"] for row in rows}
    return [by_input.get(str(path)) for path in paths]


def save_pictures(folder: Path, pictures: list[Image.Image]) -> list[Path]:
    """Each picture as a file in its own format (a JPEG stays the same JPEG), named in order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, picture in enumerate(pictures):
        path = folder / f"{i:05d}{'.jpg' if picture.format == 'JPEG' else '.png'}"
        if hasattr(picture, "file_bytes"):  # made by test_preprocessing.saved: the file it was read from
            path.write_bytes(picture.file_bytes)
        else:
            picture.save(path)
        paths.append(path)
    return paths


def png_header(width: int, height: int) -> bytes:
    """The start of a greyscale PNG file of width x height pixels: all Pillow reads before it decodes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


def direct_predictions(ckpt: str, pictures: list[Image.Image]) -> list[int]:
    """The checkpoint's digits for ``pictures`` through preprocessing.to_model_input and the bare network."""
    checkpoint = load_checkpoint(ckpt)
    inputs = torch.stack([to_model_input(p, checkpoint.datamodule.mean, checkpoint.datamodule.std) for p in pictures])
    with torch.no_grad():
        return checkpoint.model.net.eval()(inputs).argmax(dim=1).tolist()


def test_mnist_form_digits_as_png_get_the_predictions_of_their_idx_file(fake_ckpt, fake_mnist, tmp_path):
    images, _ = mnist_test_set(fake_mnist)
    digits = np.stack([to_mnist_digit(Image.fromarray(image)) for image in images[:100]])  # noisy squares, cropped
    write_idx(tmp_path / "digits-idx3-ubyte", digits)
    paths = save_pictures(tmp_path / "png", [Image.fromarray(digit) for digit in digits])
    from_idx = predict(fake_ckpt, tmp_path / "digits-idx3-ubyte", tmp_path=tmp_path)
    from_png = predict(fake_ckpt, *paths, tmp_path=tmp_path)
    assert [row["input"] for row in from_png] == list(map(str, paths))
    assert [row["input"] for row in from_idx] == [f"{tmp_path / 'digits-idx3-ubyte'}[{i}]" for i in range(100)]
    agreement = np.mean([a["prediction"] == b["prediction"] for a, b in zip(from_idx, from_png, strict=True)])
    assert agreement >= 0.97


def test_bad_files_are_skipped_one_by_one_and_the_rest_are_predicted(fake_ckpt, fake_mnist, tmp_path, capsys):
    """Each file it cannot read, or whose digits are not MNIST's 28x28, is named on stderr with the reason, and has
    no row; the others are predicted."""
    images, _ = mnist_test_set(fake_mnist)
    rng = np.random.default_rng(0)
    good = [pixel_art(to_mnist_digit(Image.fromarray(image)), rng) for image in images[:3]]
    good_paths = save_pictures(tmp_path / "in", good)
    folder = tmp_path / "in"
    (folder / "notes.png").write_text("not a picture")
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "truncated.png").write_bytes(good_paths[0].read_bytes()[:200])
    # Pillow refuses pictures of more than twice Image.MAX_IMAGE_PIXELS (89 million pixels) and warns above it,
    # which predict.py treats alike: a picture made to exhaust memory is skipped before it is decoded.
    (folder / "bomb.png").write_bytes(png_header(13_000, 14_000))  # 182 million pixels
    (folder / "large.png").write_bytes(png_header(10_000, 9_000))  # 90 million: above the limit, below twice it
    Image.new("RGB", (1, 1), "white").save(folder / "dot.png")
    Image.new("RGB", (300, 300), (200, 200, 190)).save(folder / "grey.png")
    write_idx(folder / "small-idx3-ubyte", np.zeros((2, 20, 20)))  # digits of another size than the model's
    empty_folder = tmp_path / "nothing_here"
    empty_folder.mkdir()
    capsys.readouterr()

    rows = predict(fake_ckpt, folder, tmp_path / "missing.png", empty_folder, tmp_path=tmp_path)

    assert [row["input"] for row in rows] == list(map(str, good_paths))
    assert [row["prediction"] for row in rows] == direct_predictions(fake_ckpt, good)
    captured = capsys.readouterr()
    skipped = {Path(line.split(": ")[0].removeprefix("Skipped ")).name: line for line in captured.err.splitlines()}
    bad = ["notes.png", "empty.jpg", "truncated.png", "bomb.png", "large.png", "dot.png", "grey.png"]
    assert sorted(skipped) == sorted([*bad, "small-idx3-ubyte", "missing.png", "nothing_here"]), captured.err
    assert all(line.startswith("Skipped ") and line.endswith(".") for line in skipped.values())
    assert "not an image that Pillow can read" in skipped["notes.png"]
    assert "blank:" in skipped["dot.png"] and "blank:" in skipped["grey.png"]
    assert "too large to decode safely" in skipped["bomb.png"] and "too large to decode safely" in skipped["large.png"]
    assert "(2, 1, 20, 20)" in skipped["small-idx3-ubyte"] and "(1, 28, 28)" in skipped["small-idx3-ubyte"]
    assert "Traceback" not in captured.err and "Skipped" not in captured.out


def test_a_blank_picture_is_skipped_as_blank(fake_ckpt, fake_mnist, capsys, tmp_path):
    """A picture with no ink holds no digit: skipped, saying it is blank, on stderr only; alone, nothing is
    predicted."""
    Image.new("RGB", (1, 1), "white").save(tmp_path / "blank.png")
    idx = fake_mnist / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    capsys.readouterr()
    assert main(["--ckpt_path", fake_ckpt, str(tmp_path / "blank.png"), str(idx)]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    assert [row["input"] for row in rows] == [f"{idx}[{i}]" for i in range(FAKE_TEST)]
    assert captured.err.strip() == f"Skipped {tmp_path / 'blank.png'}: blank: no ink stands out from the paper."
    assert main(["--ckpt_path", fake_ckpt, str(tmp_path / "blank.png")]) == 2
    assert "No input could be read" in capsys.readouterr().err


def test_nothing_readable_is_a_clear_error(fake_ckpt, tmp_path, capsys):
    (tmp_path / "notes.png").write_text("not a picture")
    assert main(["--ckpt_path", fake_ckpt, str(tmp_path / "notes.png"), str(tmp_path / "missing.png")]) == 2
    captured = capsys.readouterr()
    err = one_line(captured.err)
    assert "notes.png: not an image" in err and "No input could be read" in err and "Traceback" not in err
    assert captured.out == ""  # no CSV header without a row


def test_export_names_input_and_output_and_describes_the_preprocessing(fake_ckpt, fake_mnist, tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2", "onnx"]
    capsys.readouterr()
    assert export.main(flags) == 0
    files = {"pt2": "model.pt2", "onnx": "model.onnx", "preprocessing": "preprocessing.json"}
    written = {f"Wrote {tmp_path / 'export' / file}" for file in files.values()}
    assert set(capsys.readouterr().out.splitlines()) == written  # what it wrote, and nothing else
    graph = onnx.load(tmp_path / "export" / "model.onnx").graph
    assert [node.name for node in graph.input] == ["input"] and [node.name for node in graph.output] == ["output"]
    spec = json.loads((tmp_path / "export" / "preprocessing.json").read_text())
    assert spec["from_picture"]["steps"] == STEPS
    assert (spec["input"]["name"], spec["output"]["name"]) == ("input", "output")
    # The sizes are the model's, as the data module gave them: one MNIST image in, one score per class out.
    assert spec["input"]["shape"] == ["batch", 1, 28, 28] and spec["output"]["shape"] == ["batch", 10]
    # A server with model.pt2, preprocessing.json and preprocessing.py gets predict.py's answer for a file.
    images, _ = mnist_test_set(fake_mnist)
    picture = scan(to_mnist_digit(Image.fromarray(images[0])), np.random.default_rng(0))
    (path,) = save_pictures(tmp_path / "picture", [picture])
    served = torch.export.load(tmp_path / "export" / "model.pt2").module()
    mean, std = spec["normalize"]["mean"], spec["normalize"]["std"]
    with Image.open(path) as picture, torch.no_grad():
        probabilities = served(to_model_input(picture, mean, std).unsqueeze(0)).softmax(dim=1)[0]
    (row,) = predict(fake_ckpt, path, tmp_path=tmp_path)
    assert row["prediction"] == int(probabilities.argmax())
    assert row["confidence"] == pytest.approx(float(probabilities.max()), abs=1e-6)


@pytest.mark.real_data
def test_photo_like_pictures_are_read_within_3_points_of_mnist_form(real_ckpt, real_mnist, tmp_path):
    images, labels = mnist_test_set(real_mnist)
    kinds = [kind for kind in KINDS if kind != "mnist_png"]
    rng = np.random.default_rng(0)
    chosen = rng.choice(len(images), 100 * len(kinds), replace=False)  # 100 pictures of each kind
    kind_of = [kinds[i % len(kinds)] for i in range(len(chosen))]
    pictures = [KINDS[kind](images[i], rng) for kind, i in zip(kind_of, chosen, strict=True)]
    paths = save_pictures(tmp_path / "pictures", pictures)
    write_idx(tmp_path / "same-digits-idx3-ubyte", images[chosen])

    from_pictures = predictions_of(predict(real_ckpt, *paths, tmp_path=tmp_path), paths)
    in_mnist_form = [
        row["prediction"] for row in predict(real_ckpt, tmp_path / "same-digits-idx3-ubyte", tmp_path=tmp_path)
    ]
    correct = np.array([predicted == label for predicted, label in zip(from_pictures, labels[chosen], strict=True)])
    reference = np.array([predicted == label for predicted, label in zip(in_mnist_form, labels[chosen], strict=True)])
    assert abs(correct.mean() - reference.mean()) <= 0.03
    for kind in kinds:  # and no kind of picture is far off (100 pictures each: a few points of chance)
        mine = np.array(kind_of) == kind
        assert correct[mine].mean() >= reference[mine].mean() - 0.08, kind


@pytest.mark.real_data
@pytest.mark.parametrize("kind", ["thin_pen", "medium_pen"])
def test_pen_drawn_digits_are_read_within_3_points_of_mnist_form(real_ckpt, real_mnist, tmp_path, kind):
    # A pen far thinner than MNIST's strokes, or about as thin as MNIST's thinnest: each on its own, 400 pictures.
    images, labels = mnist_test_set(real_mnist)
    rng = np.random.default_rng(1)
    chosen = rng.choice(len(images), 400, replace=False)
    paths = save_pictures(tmp_path / kind, [KINDS[kind](images[i], rng) for i in chosen])
    write_idx(tmp_path / "same-digits-idx3-ubyte", images[chosen])
    from_pictures = predictions_of(predict(real_ckpt, *paths, tmp_path=tmp_path), paths)
    in_mnist_form = [
        row["prediction"] for row in predict(real_ckpt, tmp_path / "same-digits-idx3-ubyte", tmp_path=tmp_path)
    ]
    correct = np.mean([predicted == label for predicted, label in zip(from_pictures, labels[chosen], strict=True)])
    reference = np.mean([predicted == label for predicted, label in zip(in_mnist_form, labels[chosen], strict=True)])
    assert correct >= reference - 0.03


@pytest.mark.real_data
def test_mnist_test_digits_as_png_agree_with_the_idx_file(real_ckpt, real_mnist, tmp_path):
    images, labels = mnist_test_set(real_mnist)
    count = 2000
    paths = save_pictures(tmp_path / "png", [Image.fromarray(digit) for digit in images[:count]])
    from_png = predictions_of(predict(real_ckpt, *paths, tmp_path=tmp_path), paths)
    idx = real_mnist / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz"
    from_idx = [row["prediction"] for row in predict(real_ckpt, idx, tmp_path=tmp_path)][:count]
    png_correct = np.mean([predicted == label for predicted, label in zip(from_png, labels, strict=False)])
    idx_correct = np.mean([predicted == label for predicted, label in zip(from_idx, labels, strict=False)])
    assert abs(png_correct - idx_correct) <= 0.005
    assert np.mean([a == b for a, b in zip(from_png, from_idx, strict=True)]) >= 0.99


def test_read_file_gives_model_inputs_from_idx_files_and_pictures(fake_mnist, tmp_path):
    """What predict.py hands each file to: the test set's IDX file reads as the test batches do; a picture of a
    digit gives one input; a blank picture is NothingToPredict, a file that is no picture says why."""
    datamodule = photo_datamodule(fake_mnist, batch_size=FAKE_TEST)
    test_images, _ = next(iter(datamodule.test_dataloader()))
    idx = fake_mnist / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    torch.testing.assert_close(datamodule.read_file(idx), test_images)
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx.read_bytes()))
    torch.testing.assert_close(datamodule.read_file(tmp_path / "t10k-images-idx3-ubyte.gz"), test_images)
    Image.fromarray(MNIST(str(fake_mnist), train=False).data[0].numpy()).save(tmp_path / "digit.png")
    picture = datamodule.read_file(tmp_path / "digit.png")
    assert (picture.shape, picture.dtype) == ((1, *datamodule.input_shape), torch.float32)
    Image.new("L", (40, 40), 255).save(tmp_path / "blank.png")
    with pytest.raises(NothingToPredict):
        datamodule.read_file(tmp_path / "blank.png")
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(UnreadableFile, match="not an image that Pillow can read"):
        datamodule.read_file(tmp_path / "notes.png")
    (tmp_path / "notes.txt").write_text("not a picture either")
    read = sorted(path.name for path in tmp_path.iterdir() if datamodule.can_read(path))
    assert read == ["blank.png", "digit.png", "notes.png", "t10k-images-idx3-ubyte.gz"]


def test_the_preprocessing_it_describes_is_its_own_normalization():
    spec = MNISTDataModule(dataset="kmnist").preprocessing()  # for export's preprocessing.json
    assert (spec["normalize"]["mean"], spec["normalize"]["std"]) == mnist_data.DATASETS["kmnist"][1:]
    assert spec["from_picture"]["steps"] and "from_mnist_digit" in spec


def photo_datamodule(root, **kwargs):
    datamodule = MNISTDataModule(data_dir=str(root), val_size=FAKE_VAL, **kwargs)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule
