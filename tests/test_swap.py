"""The first things a user of the example changes, each one flag away: their own network (--net) and another
MNIST-format dataset (--data.dataset). Trained, evaluated, predicted and exported with no other file changed."""

import csv
import json

import example
import pytest
import torch
import yaml
from helpers import FAKE_TEST, TINY_RUN, SmallCNN, write_fake_dataset
from torchvision.datasets import FashionMNIST

from mnist_lightning.core import evaluate, export, predict
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.train import main

pytestmark = [example.data, example.task]


def test_a_user_cnn_on_fashion_mnist_trains_evaluates_predicts_and_exports(tmp_path, capsys):
    data = write_fake_dataset(tmp_path / "data", "FashionMNIST")
    run = tmp_path / "run"
    flags = ["--data.data_dir", str(data), "--output_dir", str(run), *TINY_RUN, "--accelerator", "cpu"]
    assert main([*flags, "--net", "helpers.SmallCNN", "--net.channels", "4", "--data.dataset", "fashion_mnist"]) == 0

    record = yaml.safe_load((run / "config.yaml").read_text())
    assert record["net"] == {"class_path": "helpers.SmallCNN", "init_args": {"channels": 4}}
    assert record["data"]["init_args"]["dataset"] == "fashion_mnist"
    trained = json.loads((run / "metrics.json").read_text())
    assert trained["test/acc"] > 0.9 and trained["best_checkpoint"].endswith(f"acc{trained['best_val/acc']:.4f}.ckpt")

    # The checkpoint alone rebuilds the user's network and the dataset settings.
    checkpoint = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert isinstance(checkpoint.model.net, SmallCNN) and checkpoint.model.net.classifier.in_features == 4 * 7 * 7
    assert checkpoint.datamodule.hparams.dataset == "fashion_mnist"

    best = trained["best_checkpoint"]
    assert evaluate.main(["--ckpt_path", best, "--output_dir", str(tmp_path / "eval"), "--accelerator", "cpu"]) == 0
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluated["test/acc"] == trained["test/acc"]

    out = tmp_path / "predictions.csv"  # of the data module's predict set: FashionMNIST's test images
    assert predict.main(["--ckpt_path", best, "--output", str(out), "--accelerator", "cpu"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["input", "prediction", "confidence"] and len(rows) == FAKE_TEST
    assert [row["input"] for row in rows[:2]] == ["predict_dataloader[0]", "predict_dataloader[1]"]
    labels = FashionMNIST(str(data), train=False).targets.tolist()  # the predict set is the test set, in order
    right = sum(int(row["prediction"]) == label for row, label in zip(rows, labels, strict=True))
    assert right / FAKE_TEST == pytest.approx(trained["test/acc"], abs=1e-6)

    assert export.main(["--ckpt_path", best, "--output_dir", str(tmp_path / "export"), "--formats", "pt2"]) == 0
    exported = torch.export.load(tmp_path / "export" / "model.pt2").module()
    images = torch.randn(3, 1, 28, 28)
    best_net = load_checkpoint(best).model.net.eval()
    torch.testing.assert_close(exported(images), best_net(images))
