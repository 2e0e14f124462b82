"""What can only break on a GPU, tested on every device: each test takes the device as a parameter, its cuda case
marked gpu (skipped without CUDA, see conftest.py) and its cpu case run everywhere, so that CI runs every test body
and a test of a removed mechanism fails there, not first on a GPU. In this process where it can: `pytest -m gpu`
must fit the minutes a GPU is lent. The gpu-check command's CPU mode (which CI runs) is tested here too.
"""

import contextlib
import importlib
import json
import os
import runpy  # only with_ladder
import subprocess
import sys  # only with_ladder
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import FAKE_VAL, TINY_RUN, train_run

gpu = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
ACCELERATOR = {"cpu": "cpu", "cuda": "gpu"}
DEVICES = ["cpu", pytest.param("cuda", marks=gpu)]
SYNC_WARNING = "called a synchronizing CUDA operation"


def load_gpu_check(monkeypatch):
    """scripts/gpu_check.py, imported as `python scripts/gpu_check.py` runs it: with its folder on sys.path."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    return importlib.import_module("gpu_check")


@contextlib.contextmanager
def counting_host_syncs(counter: list, device: str):
    """Count the CUDA operations that make the host wait for the GPU (torch's sync debug mode) while inside; on the
    CPU there are none to count, and the code around it runs all the same."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
    counter.append(sum(SYNC_WARNING in str(warning.message) for warning in caught))


@pytest.mark.parametrize("device", DEVICES)
def test_train_on_one_device(fake_mnist, tmp_path, device):
    flags = ["--accelerator", ACCELERATOR[device], "--devices", "1", "--data.data_dir", str(fake_mnist)]
    metrics = train_run(*flags, "--output_dir", str(tmp_path), *TINY_RUN)
    assert metrics["accelerator"] == device and metrics["devices"] == 1 and metrics["test/acc"] > 0.9
    assert (metrics["peak_gpu_mb"] > 0) if device == "cuda" else metrics["peak_gpu_mb"] is None


@pytest.mark.parametrize("device", DEVICES)
def test_batches_reach_the_network_on_the_device(fake_mnist, device):
    """The data module serves batches from host memory; Lightning moves each one to the device before the step."""
    from lightning.pytorch import Callback, Trainer

    from mnist_lightning.datamodule import MNISTDataModule
    from mnist_lightning.lightning_module import Classifier

    seen = []

    class SeeBatches(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append([(tensor.device.type, tensor.dtype) for tensor in batch])

    trainer = Trainer(
        accelerator=ACCELERATOR[device],
        devices=1,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        callbacks=[SeeBatches()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL, batch_size=100)
    trainer.fit(Classifier(datamodule.input_shape, datamodule.num_classes), datamodule=datamodule)
    assert seen == [[(device, torch.float32), (device, torch.int64)]] * 2


@pytest.mark.parametrize(
    ("device", "precision"),
    [
        ("cpu", "bf16-mixed"),  # Lightning turns 16-mixed into bf16-mixed on the CPU
        pytest.param("cuda", "16-mixed", marks=gpu),
        pytest.param("cuda", "bf16-mixed", marks=gpu),
    ],
)
def test_trainer_mixed_precision(fake_mnist, tmp_path, device, precision):
    if device == "cuda" and precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16 support")
    flags = ["--accelerator", ACCELERATOR[device], "--devices", "1", "--precision", precision]
    metrics = train_run(*flags, "--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path), *TINY_RUN)
    assert metrics["precision"] == precision and metrics["accelerator"] == device and metrics["test/acc"] > 0.9


# with_ladder:
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


# end with_ladder
@pytest.mark.parametrize("device", DEVICES)
def test_no_host_sync_per_training_step(fake_mnist, tmp_path, monkeypatch, device):
    """Each epoch may sync a few times (the epoch loss comes back, checkpoints are written); a step must not.
    The Trainer is counted epoch by epoch (20 steps each)."""
    from lightning.pytorch import Callback

    # with_ladder:
    # The plain and Fabric loops over their whole run (2 epochs of 100 steps); the Trainer rung's LightningModule and
    # DataModule are train.py's, whose Trainer is counted below, epoch by epoch (its validation steps sync).
    for rung in ("plain", "fabric"):
        syncs: list[int] = []
        flags = ["--data_dir", str(fake_mnist), *RUNG_STEPS, "--output_dir", str(tmp_path / rung)]
        with counting_host_syncs(syncs, device):
            run_rung(monkeypatch, rung, device, *flags)
        assert syncs[0] < 100, f"{rung}: {syncs[0]} host syncs in a run of 200 training steps"
    # end with_ladder
    per_epoch: list[int] = []

    class CountSyncs(Callback):
        """From the start of each training epoch to the start of its validation: every training step."""

        def on_train_epoch_start(self, trainer, pl_module):
            self.context = counting_host_syncs(per_epoch, device)
            self.context.__enter__()

        def on_validation_start(self, trainer, pl_module):
            # trainer.training is False here (validation runs inside fit): the sanity check is what to skip.
            if not trainer.sanity_checking and hasattr(self, "context"):
                self.context.__exit__(None, None, None)
                del self.context

    from mnist_lightning.core.cli import build_training, parse_args

    flags = ["--data.data_dir", str(fake_mnist), "--data.val_size", str(FAKE_VAL), "--batch_size", "50"]
    flags += ["--max_epochs", "2", "--accelerator", ACCELERATOR[device], "--output_dir", str(tmp_path / "trainer")]
    training = build_training(parse_args(flags))
    training.trainer.callbacks.insert(0, CountSyncs())
    training.trainer.fit(training.model, datamodule=training.datamodule)
    assert len(per_epoch) == 2 and max(per_epoch) <= 5, f"{per_epoch} host syncs in epochs of 20 steps"


@pytest.mark.parametrize("device", DEVICES)
def test_epoch_times_wait_for_the_device(fake_mnist, device):
    """EpochHistory reads the clock only once the device has finished: work still queued counts in the epoch."""
    from lightning.pytorch import Callback, Trainer

    from mnist_lightning.core.callbacks import EpochHistory
    from mnist_lightning.datamodule import MNISTDataModule
    from mnist_lightning.lightning_module import Classifier

    cycles = 0
    if device == "cuda":
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.cuda._sleep(100_000_000)  # a kernel that spins for that many GPU clock cycles
        torch.cuda.synchronize()
        cycles = int(100_000_000 * 0.5 / (time.perf_counter() - start))

    class QueueWork(Callback):  # runs before EpochHistory's hook
        def on_train_epoch_end(self, trainer, pl_module):  # half a second of work
            if device == "cuda":
                torch.cuda._sleep(cycles)  # queued: the hook returns at once, the GPU works on after it
            else:
                time.sleep(0.5)  # the CPU works as it is asked: the hook returns once it is done

    history = EpochHistory()
    trainer = Trainer(
        accelerator=ACCELERATOR[device],
        devices=1,
        max_epochs=1,
        callbacks=[QueueWork(), history],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL, batch_size=100)
    trainer.fit(Classifier(datamodule.input_shape, datamodule.num_classes), datamodule=datamodule)
    assert history.rows[0]["seconds"] >= 0.4


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_step_and_skips_what_needs_cuda(fake_mnist, tmp_path, capsys, monkeypatch):
    """What CI runs: make gpu-check-cpu, on the fake data."""
    # The scripts it runs import this checkout's package.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    flags = ["--cpu", "--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "100"]
    gpu_check = load_gpu_check(monkeypatch)
    assert gpu_check.main([*flags, "--max_epochs", "2", "--results_dir", str(tmp_path)]) == 0, capsys.readouterr()
    results = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    status = {step["step"]: step["status"] for step in results["steps"]}
    assert results["mode"] == "cpu" and results["failed"] == []
    steps = ["devices.py", "train.py --accelerator cpu --devices 1", "pytest -m gpu"]
    steps += ["evaluate.py", "predict.py", "export.py"]
    steps += ["compare.py"]  # only with_ladder
    for step in steps:
        assert any(name.startswith(step) and state == "ok" for name, state in status.items()), step
    assert "| `devices.py` | ok |" in (tmp_path / "gpu_check_cpu.md").read_text()
    # with_ladder:
    compares = [step for step in results["steps"] if step["step"].startswith("compare.py")]
    assert len(compares) == 1 and compares[0]["note"].startswith("bit-identical"), compares
    # end with_ladder


def test_gpu_check_with_a_failed_step_exits_1_naming_it(fake_mnist, tmp_path, capsys, monkeypatch):
    gpu_check = load_gpu_check(monkeypatch)
    failing = subprocess.CompletedProcess([], returncode=3, stdout="", stderr="it broke")
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *args, **kwargs: failing)
    flags = ["--cpu", "--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--results_dir", str(tmp_path)]
    assert gpu_check.main(flags) == 1
    assert "step(s) failed: devices.py; train.py" in capsys.readouterr().err
    results = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    assert results["failed"] and results["steps"][0]["output_tail"] == "it broke"


def test_gpu_check_without_a_gpu_says_to_use_cpu_mode(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_gpu_check(monkeypatch).main(["--results_dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "No CUDA GPU can be used here" in err and "--cpu" in err
    assert not list(tmp_path.iterdir())
