"""The example's data module under DDP (two CPU processes, gloo): it shards the test set itself, so that each test
image is tested once though the two processes cannot share the test set evenly, and Lightning has nothing to warn of.
The machinery's own DDP tests run on the tests' task: test_scale_and_precision.py, test_ddp_stop.py."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import example
import pytest
from helpers import FAKE_TEST, TINY_RUN, fake_digits, write_idx

from mnist_lightning.core.evaluate import main as evaluate_main

pytestmark = [pytest.mark.slow, example.data, example.task]
ROOT = Path(__file__).resolve().parents[1]


def test_ddp_tests_each_image_once_without_warnings(fake_mnist, tmp_path, capsys):
    data = shutil.copytree(fake_mnist, tmp_path / "data")
    images, labels = fake_digits(FAKE_TEST + 1, seed=1)  # odd
    write_idx(data / "MNIST" / "raw" / "t10k-images-idx3-ubyte", images)
    write_idx(data / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", labels)
    run = tmp_path / "ddp"
    flags = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--data.data_dir", str(data)]
    command = [sys.executable, "scripts/train.py", *flags, "--output_dir", str(run), *TINY_RUN]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr and "DistributedSampler" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.count("Tested the best of 2 epochs: ") == 1  # only rank 0 prints the summary
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["devices"] == 2 and metrics["test/acc"] > 0.9
    assert sum(map(sum, metrics["test/confusion_matrix"])) == FAKE_TEST + 1  # only with_plots
    # The same checkpoint tested in one process, which tests every image once: the same scores.
    flags = ["--ckpt_path", metrics["best_checkpoint"], "--accelerator", "cpu", "--data.data_dir", str(data)]
    assert evaluate_main([*flags, "--output_dir", str(tmp_path / "one")]) == 0, capsys.readouterr().err
    alone = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(alone["test/acc"], abs=1e-6)
    assert metrics["test/loss"] == pytest.approx(alone["test/loss"], rel=1e-5)
