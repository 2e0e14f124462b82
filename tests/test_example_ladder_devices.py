"""The ladder's rungs (the with_ladder option: plain PyTorch, Fabric, Trainer, each training the MNIST example) on
every device, as test_gpu.py tests the template's own Trainer: each test takes the device as a parameter, its cuda
case marked gpu (run by `pytest -m gpu` and `make gpu-check`), its cpu case run everywhere; and the Fabric rung as two
torchrun "nodes", the same job as two processes on one node."""

import json
import os
import runpy
import sys
from pathlib import Path

import example
import pytest
import torch
from helpers import FAKE_VAL
from test_gpu import ACCELERATOR, DEVICES, counting_host_syncs, gpu
from test_two_nodes import two_nodes_as_one_job

pytestmark = [example.data, example.task]
ROOT = Path(__file__).resolve().parents[1]
RUNGS = {"plain": "train_pytorch.py", "fabric": "train_fabric.py", "trainer": "train_trainer.py"}
# 1,000 training images in batches of 10: 100 steps per epoch, so per-step syncs cannot hide among per-epoch ones.
RUNG_STEPS = ["--val_size", str(FAKE_VAL), "--batch_size", "10", "--max_epochs", "2"]


def run_rung(monkeypatch, rung: str, device: str, *flags: str) -> None:
    """A rung's script in this process, as `python scripts/<rung> ...` runs it (its folder on sys.path)."""
    on_device = ["--device", device] if rung == "plain" else ["--accelerator", ACCELERATOR[device]]
    path = ROOT / "scripts" / RUNGS[rung]
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setattr(sys, "argv", [str(path), *on_device, *flags])
    runpy.run_path(str(path), run_name="__main__")


@pytest.mark.parametrize(("device", "precision"), [("cpu", "bf16-mixed"), pytest.param("cuda", "16-mixed", marks=gpu)])
@pytest.mark.parametrize("rung", list(RUNGS))
def test_mixed_precision_on_the_rungs(fake_mnist, tmp_path, monkeypatch, device, precision, rung):
    """16-mixed on a GPU scales the loss (Lightning itself; the plain rung with a GradScaler); the CPU has bf16 only."""
    from lightning import Fabric

    scaler = Fabric(accelerator=ACCELERATOR[device], devices=1, precision=precision).strategy.precision.scaler
    assert (scaler is not None) == (precision == "16-mixed")
    flags = ["--precision", precision, "--data_dir", str(fake_mnist), *RUNG_STEPS, "--batch_size", "50"]
    run_rung(monkeypatch, rung, device, *flags, "--output_dir", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["precision"] == precision and metrics["accelerator"] == device and metrics["test/acc"] > 0.9


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rung", ["plain", "fabric"])
def test_no_host_sync_per_training_step_on_the_plain_and_fabric_rungs(fake_mnist, tmp_path, monkeypatch, device, rung):
    """Counted over the whole run (2 epochs of 100 steps); the Trainer rung's LightningModule and DataModule are the
    project's, whose Trainer test_gpu.py counts epoch by epoch."""
    syncs: list[int] = []
    flags = ["--data_dir", str(fake_mnist), *RUNG_STEPS, "--output_dir", str(tmp_path / rung)]
    with counting_host_syncs(syncs, device):
        run_rung(monkeypatch, rung, device, *flags)
    assert (tmp_path / rung / "metrics.json").is_file()  # the run did run
    assert syncs[0] < 100, f"{rung}: {syncs[0]} host syncs in a run of 200 training steps"


@pytest.mark.slow
def test_the_fabric_rung_on_two_nodes_trains_as_one_job_like_two_processes_on_one_node(fake_mnist, tmp_path):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "100", "--max_epochs", "2"]
    flags += ["--accelerator", "cpu", "--strategy", "ddp"]
    script = [str(ROOT / "scripts" / "train_fabric.py")]
    reference, two = two_nodes_as_one_job(script, flags, tmp_path, dict(os.environ), "Test accuracy")
    # The same job: the same shards, the same gradient all-reduce, so the same numbers.
    assert [row["train/loss"] for row in two["history"]] == [row["train/loss"] for row in reference["history"]]
    assert [two[key] for key in ("test/acc", "test/loss", "best_val/acc")] == [
        reference[key] for key in ("test/acc", "test/loss", "best_val/acc")
    ]
    weights = [
        torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]
        for run in (tmp_path / "one_node", tmp_path / "two_nodes")
    ]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert reference["test/acc"] > 0.9
