"""DDP on two CPU processes, bf16 mixed and true precisions, determinism, and the classic SGD config."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAKE_TEST, TINY_RUN, fake_digits, train_run, write_idx

from mnist_lightning.core.cli import parse_args

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = {"fit_seconds", "best_checkpoint", "peak_host_mb", "peak_gpu_mb", "history"}


def run(data_dir, output_dir, *flags):
    return train_run("--data.data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_RUN, *flags)


def test_bf16_mixed_precision_on_cpu(fake_mnist, tmp_path):
    metrics = run(fake_mnist, tmp_path / "bf16", "--accelerator", "cpu", "--precision", "bf16-mixed")
    assert metrics["precision"] == "bf16-mixed" and metrics["test/acc"] > 0.9


@pytest.mark.parametrize("precision", ["bf16-true", "64-true"])  # 16-true: Adam overflows it (test_resume)
def test_true_precisions_train_with_the_model_summary_shown(fake_mnist, tmp_path, precision):
    """The model summary runs an example input through the network: it must be in the weights' dtype."""
    metrics = run(fake_mnist, tmp_path / "run", "--precision", precision, "--enable_model_summary", "true")
    assert metrics["precision"] == precision and metrics["test/acc"] is not None


def test_same_seed_and_deterministic_runs_write_identical_metrics(fake_mnist, tmp_path):
    flags = ["--accelerator", "cpu", "--seed", "7", "--deterministic", "true"]
    first, second = (run(fake_mnist, tmp_path / name, *flags) for name in ("a", "b"))
    assert {k: v for k, v in first.items() if k not in VOLATILE} == {
        k: v for k, v in second.items() if k not in VOLATILE
    }
    losses = [[row["train/loss"] for row in m["history"]] for m in (first, second)]
    assert losses[0] == losses[1]
    assert run(fake_mnist, tmp_path / "c", "--accelerator", "cpu", "--seed", "8")["history"] != first["history"]


@pytest.mark.slow
def test_ddp_with_two_cpu_processes(fake_mnist, tmp_path):
    """Lightning's own DDP (gloo on CPU): one metrics.json from rank 0, metrics synced over both ranks, each test
    sample counted once though the two processes cannot share the test set evenly."""
    data = shutil.copytree(fake_mnist, tmp_path / "data")
    images, labels = fake_digits(FAKE_TEST + 1, seed=1)  # odd
    write_idx(data / "MNIST" / "raw" / "t10k-images-idx3-ubyte", images)
    write_idx(data / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", labels)
    output_dir = tmp_path / "ddp"
    flags = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--data.data_dir", str(data)]
    flags += ["--output_dir", str(output_dir), *TINY_RUN]
    result = subprocess.run([sys.executable, "scripts/train.py", *flags], cwd=ROOT, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert "Warning" not in result.stderr.decode() and "DistributedSampler" not in result.stderr.decode()
    metrics = json.loads((output_dir / "metrics.json").read_text())
    assert metrics["devices"] == 2 and metrics["test/acc"] > 0.9
    assert sum(map(sum, metrics["test/confusion_matrix"])) == FAKE_TEST + 1  # only with_plots
    # Each rank trained on its own half: 1,000 training images, batch 100 -> 5 steps per rank per epoch.
    steps = [line for line in (output_dir / "logs" / "metrics.csv").read_text().splitlines()[1:] if line.split(",")[0]]
    assert steps  # the CSV logger wrote, once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "ddp"]  # no second run folder from rank 1
    assert result.stdout.decode().count("Test accuracy") == 1  # only rank 0 prints the summary
    # evaluate.py on two processes too: one folder, rank 0's, with the training's test result.
    evaluate = [
        "scripts/evaluate.py",
        "--ckpt_path",
        metrics["best_checkpoint"],
        "--accelerator",
        "cpu",
        "--devices",
        "2",
    ]
    evaluate += ["--output_dir", str(tmp_path / "evaluated")]
    result = subprocess.run([sys.executable, *evaluate], cwd=ROOT, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert json.loads((tmp_path / "evaluated" / "metrics.json").read_text())["test/acc"] == metrics["test/acc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "ddp", "evaluated"]
    # A run stopped before its first checkpoint (its record alone) is started over by its resume command, by every
    # process: rank 1 too, which is given that command's --ckpt_path last by Lightning.
    unstarted = tmp_path / "unstarted"
    unstarted.mkdir()
    shutil.copy(output_dir / "config.yaml", unstarted / "config.yaml")
    resume = ["--output_dir", str(unstarted), "--ckpt_path", "last", "--data.data_dir", str(data)]
    result = subprocess.run([sys.executable, "scripts/train.py", *resume], cwd=ROOT, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert json.loads((unstarted / "metrics.json").read_text())["devices"] == 2


@pytest.mark.real_data
def test_classic_sgd_config_reaches_91_percent(real_mnist, tmp_path):
    config = ["--config", str(ROOT / "configs" / "classic_sgd.yaml"), "--data.data_dir", str(real_mnist)]
    metrics = train_run(*config, "--output_dir", str(tmp_path / "sgd"), "--enable_progress_bar", "false")
    assert (metrics["batch_size"], metrics["epochs"]) == (32, 5)
    assert metrics["test/acc"] >= 0.91


def test_classic_sgd_config_parses_to_its_recipe():
    config = parse_args(["--config", str(ROOT / "configs" / "classic_sgd.yaml")])
    assert (config.optimizer, config.lr, config.momentum, config.batch_size) == ("sgd", 0.01, 0.9, 32)
    assert (config.max_epochs, config.lr_schedule) == (5, "constant")
