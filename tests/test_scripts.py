"""evaluate.py, predict.py, export.py and devices.py on a checkpoint trained on the fake MNIST."""

import csv
import json
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_RUN, fake_digits, one_line, write_idx
from PIL import Image

from mnist_lightning import devices
from mnist_lightning.evaluate import build_parser as evaluate_parser
from mnist_lightning.evaluate import evaluate
from mnist_lightning.export import build_parser as export_parser
from mnist_lightning.export import export
from mnist_lightning.mnist import normalize
from mnist_lightning.predict import main as predict_main
from mnist_lightning.predict import to_mnist
from mnist_lightning.train import parse_config, train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(fake_mnist, tmp_path_factory) -> dict:
    output_dir = tmp_path_factory.mktemp("trained") / "run"
    return train(parse_config(["--data_dir", str(fake_mnist), "--output_dir", str(output_dir), *TINY_RUN]))


def test_evaluate_reproduces_the_test_accuracy_of_training(trained, tmp_path):
    config = evaluate_parser().parse_args(
        ["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]
    )
    metrics = evaluate(config)
    assert metrics["test/acc"] == pytest.approx(trained["test/acc"])
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert {"test/acc", "test/loss", "epochs", "fit_seconds", "accelerator", "devices"} <= written.keys()


def test_a_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    from mnist_lightning.evaluate import main

    assert main(["--ckpt_path", str(tmp_path / "none.ckpt")]) == 2
    assert "no such file" in one_line(capsys.readouterr().err)


def test_a_corrupt_checkpoint_is_a_clear_error(trained, tmp_path, capsys):
    from mnist_lightning.evaluate import main

    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(Path(trained["best_checkpoint"]).read_bytes()[:1000])
    assert main(["--ckpt_path", str(corrupt), "--output_dir", str(tmp_path / "e")]) == 2
    assert "is not a readable checkpoint" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "e").exists()


def digit_picture(digit_image: np.ndarray, size: int, colour: bool) -> Image.Image:
    """A scan-like picture of an MNIST image: dark ink on white paper, larger, optionally in colour."""
    picture = Image.fromarray(255 - digit_image).resize((size, size))
    return picture.convert("RGB") if colour else picture


def test_to_mnist_normalizes_size_colour_and_polarity():
    images, _ = fake_digits(1, seed=3)
    tensor = to_mnist(digit_picture(images[0], 112, colour=True))
    assert tensor.shape == (28, 28) and tensor.dtype == torch.uint8
    assert tensor[0].float().mean() < 10  # background turned dark, as in MNIST


def test_predict_images_folders_and_idx_to_csv_and_json(trained, fake_mnist, tmp_path, capsys):
    images, labels = fake_digits(6, seed=7)
    folder = tmp_path / "pictures"
    folder.mkdir()
    for i, image in enumerate(images[:3]):
        digit_picture(image, 56 + 28 * i, colour=i == 1).save(folder / f"digit{i}.png")
    digit_picture(images[3], 84, colour=False).save(tmp_path / "single.jpg", quality=95)
    (folder / "notes.png").write_text("not an image")
    write_idx(tmp_path / "few-images-idx3-ubyte", images[4:])
    inputs = [str(folder), str(tmp_path / "single.jpg"), str(tmp_path / "few-images-idx3-ubyte")]
    code = predict_main([*inputs, "--ckpt_path", trained["best_checkpoint"], "--output", str(tmp_path / "p.csv")])
    captured = capsys.readouterr()
    assert code == 0
    assert "notes.png: not a readable image" in one_line(captured.err)  # skipped, the others still predicted
    with (tmp_path / "p.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 6 and {"input", "prediction", "confidence", "p0", "p9"} <= rows[0].keys()
    for row in rows:
        assert sum(float(row[f"p{d}"]) for d in range(10)) == pytest.approx(1, abs=1e-4)
    predicted = {row["input"]: int(row["prediction"]) for row in rows}
    assert predicted[f"{tmp_path / 'few-images-idx3-ubyte'}[0]"] == labels[4]
    assert (
        predict_main([inputs[2], "--ckpt_path", trained["best_checkpoint"], "--output", str(tmp_path / "p.json")]) == 0
    )
    assert len(json.loads((tmp_path / "p.json").read_text())["predictions"]) == 2


def test_predict_with_nothing_readable_is_a_clear_error(trained, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert predict_main([str(tmp_path / "empty"), "--ckpt_path", trained["best_checkpoint"]]) == 2
    err = one_line(capsys.readouterr().err)
    assert "holds no image" in err and "nothing to predict" in err


def test_exports_give_the_checkpoint_outputs(trained, fake_mnist, tmp_path):
    paths = export(
        export_parser().parse_args(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path)])
    )
    from mnist_lightning.checkpoints import load_checkpoint

    net = load_checkpoint(trained["best_checkpoint"]).model.net.eval()
    images = normalize(torch.from_numpy(fake_digits(5, seed=11)[0]))
    with torch.no_grad():
        expected = net(images)
    exported = torch.export.load(paths["pt2"]).module()
    torch.testing.assert_close(exported(images), expected)
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    session = ReferenceEvaluator(onnx.load(str(paths["onnx"])))
    (logits,) = session.run(None, {"images": images.numpy()})
    np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-4, atol=1e-5)


def test_devices_report_says_what_is_used_and_why(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["devices.py"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts" / "devices.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = one_line(capsys.readouterr().out)
    assert f"PyTorch {torch.__version__}" in out and "--accelerator auto --devices auto picks:" in out
    if not torch.cuda.is_available():
        assert "No CUDA GPU is used because" in out


def test_why_no_cuda_names_the_cause(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    if torch.version.cuda:
        assert "CUDA_VISIBLE_DEVICES" in devices.why_no_cuda()
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in devices.why_no_cuda()


def test_only_gpu_runs_keep_lightnings_per_call_nvml_check(monkeypatch):
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # what importing Lightning sets
    devices.cache_cuda_check_off_gpu(torch.device("cuda", 0))
    assert os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"  # guards the processes Lightning forks
    devices.cache_cuda_check_off_gpu(torch.device("cpu"))
    assert os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "0"
