"""What can only break on a GPU: the dataset placed on it, no host sync per training step, the mixed-precision
plugins, CUDA-aware epoch timing; the gpu-check command's CPU mode (which CI runs) is tested here too.

Tests marked gpu are collected everywhere and skipped where CUDA is unavailable (see conftest.py);
`python scripts/gpu_check.py` runs them on a GPU machine with everything else that needs one.
"""

import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers import FAKE_VAL, TINY_RUN, train_run

gpu = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
SYNC_WARNING = "called a synchronizing CUDA operation"
# 1,000 training images in batches of 50: 20 steps per epoch, so per-step syncs cannot hide among per-epoch ones.
# The plain and Fabric rungs take --val_size; train.py takes the data module's arguments as --data.NAME.
STEPS_RUN = ["--val_size", str(FAKE_VAL), "--batch_size", "50", "--max_epochs", "2"]
TRAINER_STEPS_RUN = ["--data.val_size", str(FAKE_VAL), "--batch_size", "50", "--max_epochs", "2"]
# A rung (scripts/train_pytorch.py or train_fabric.py) run in a fresh process with torch's sync debug mode on: each
# CUDA operation that makes the host wait for the GPU prints one warning on stderr.
COUNTING_SYNCS = """
import runpy, sys, warnings
import torch
warnings.simplefilter("always")
torch.cuda.set_sync_debug_mode("warn")
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script(name: str, *flags: str, code: str | None = None) -> subprocess.CompletedProcess:
    """scripts/<name> in a fresh process (through ``code`` if given), with this checkout's package importable."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    runner = ["-c", code] if code else []
    command = [sys.executable, *runner, str(ROOT / "scripts" / name), *flags]
    return subprocess.run(command, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": path}, timeout=600)


def load_gpu_check(monkeypatch):
    """scripts/gpu_check.py, imported as `python scripts/gpu_check.py` runs it: with its folder on sys.path."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    return importlib.import_module("gpu_check")


@contextlib.contextmanager
def counting_host_syncs(counter: list):
    """Count the CUDA operations that make the host wait for the GPU (torch's sync debug mode) while inside."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    counter.append(sum(SYNC_WARNING in str(warning.message) for warning in caught))


@gpu
def test_train_on_one_gpu(fake_mnist, tmp_path):
    flags = ["--accelerator", "gpu", "--devices", "1", "--data.data_dir", str(fake_mnist)]
    metrics = train_run(*flags, "--output_dir", str(tmp_path), *TINY_RUN)
    assert metrics["accelerator"] == "cuda" and metrics["devices"] == 1
    assert metrics["test/acc"] > 0.9 and metrics["peak_gpu_mb"] > 0


@gpu
def test_dataset_lives_on_the_gpu(fake_mnist):
    from lightning.pytorch import Trainer

    from mnist_lightning.datamodule import MNISTDataModule

    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL)
    datamodule.trainer = Trainer(accelerator="gpu", devices=1, logger=False)
    datamodule.trainer.strategy.setup_environment()
    datamodule.setup("fit")
    assert all(tensor.is_cuda for pair in datamodule.splits.values() for tensor in pair)
    images, labels = next(iter(datamodule.train_dataloader()))
    assert images.is_cuda and labels.is_cuda and images.dtype == torch.float32  # sliced and normalized on the GPU


@gpu
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_trainer_mixed_precision_on_the_gpu(fake_mnist, tmp_path, precision):
    if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16 support")
    flags = ["--accelerator", "gpu", "--devices", "1", "--precision", precision, "--data.data_dir", str(fake_mnist)]
    metrics = train_run(*flags, "--output_dir", str(tmp_path), *TINY_RUN)
    assert metrics["precision"] == precision and metrics["test/acc"] > 0.9


# with_ladder:
@gpu
@pytest.mark.parametrize("rung", ["train_pytorch.py", "train_fabric.py"])
def test_16_mixed_precision_on_the_gpu(fake_mnist, tmp_path, rung):
    """Fabric scales the loss itself (fabric.backward; its optimizer unscales); the plain rung with a GradScaler."""
    from lightning import Fabric

    assert Fabric(accelerator="gpu", devices=1, precision="16-mixed").strategy.precision.scaler is not None
    device = ["--device", "cuda"] if rung == "train_pytorch.py" else ["--accelerator", "gpu"]
    flags = [*device, "--precision", "16-mixed", "--data_dir", str(fake_mnist), *STEPS_RUN]
    result = run_script(rung, *flags, "--output_dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["precision"] == "16-mixed" and metrics["accelerator"] == "cuda" and metrics["test/acc"] > 0.9


# end with_ladder
@gpu
def test_no_host_sync_per_training_step_on_any_rung(fake_mnist, tmp_path):
    """Each epoch may sync a few times (the epoch loss comes back, checkpoints are written); a step must not.
    The plain and Fabric rungs are counted over their whole run: 2 epochs of 100 steps, against far fewer syncs."""
    from lightning.pytorch import Callback

    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "10", "--max_epochs", "2"]
    # with_ladder:
    for rung, device in (("train_pytorch.py", ["--device", "cuda"]), ("train_fabric.py", ["--accelerator", "gpu"])):
        result = run_script(rung, *flags, *device, "--output_dir", str(tmp_path / rung), code=COUNTING_SYNCS)
        assert result.returncode == 0, result.stderr[-3000:]
        syncs = result.stderr.count(SYNC_WARNING)
        assert syncs < 100, f"{rung}: {syncs} host syncs in a run of 200 training steps"
    # end with_ladder
    counts: dict[str, list] = {"trainer": []}

    class CountSyncs(Callback):
        """From the start of each training epoch to the start of its validation: every training step."""

        def on_train_epoch_start(self, trainer, pl_module):
            self.context = counting_host_syncs(counts["trainer"])
            self.context.__enter__()

        def on_validation_start(self, trainer, pl_module):
            # trainer.training is False here (validation runs inside fit): the sanity check is what to skip.
            if not trainer.sanity_checking and hasattr(self, "context"):
                self.context.__exit__(None, None, None)
                del self.context

    from mnist_lightning.core.cli import build_training, parse_args

    flags = ["--data.data_dir", str(fake_mnist), *TRAINER_STEPS_RUN, "--accelerator", "gpu"]
    training = build_training(parse_args([*flags, "--output_dir", str(tmp_path / "trainer")]))
    training.trainer.callbacks.insert(0, CountSyncs())
    training.trainer.fit(training.model, datamodule=training.datamodule)
    for rung, per_epoch in counts.items():
        assert len(per_epoch) == 2, rung
        assert max(per_epoch) <= 5, f"{rung}: {per_epoch} host syncs in epochs of 20 steps"


@gpu
def test_epoch_times_wait_for_the_gpu(fake_mnist):
    """EpochHistory reads the clock only after the GPU has finished: work still queued counts in the epoch."""
    from lightning.pytorch import Callback, Trainer

    from mnist_lightning.core.callbacks import EpochHistory
    from mnist_lightning.datamodule import MNISTDataModule
    from mnist_lightning.lightning_module import Classifier

    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(100_000_000)  # a kernel that spins for that many GPU clock cycles
    torch.cuda.synchronize()
    sleep_seconds = time.perf_counter() - start
    cycles = int(100_000_000 * 0.5 / sleep_seconds)  # about half a second of GPU time

    class QueueGpuWork(Callback):  # runs before EpochHistory's hook: the work is queued, not finished
        def on_train_epoch_end(self, trainer, pl_module):
            torch.cuda._sleep(cycles)

    history = EpochHistory()
    trainer = Trainer(
        accelerator="gpu",
        devices=1,
        max_epochs=1,
        callbacks=[QueueGpuWork(), history],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL, batch_size=100)
    trainer.fit(Classifier(datamodule.input_shape, datamodule.num_classes), datamodule=datamodule)
    assert history.rows[0]["seconds"] >= 0.4


# with_ladder:
@gpu
def test_compiled_rungs_on_the_gpu(fake_mnist, tmp_path):
    """Compiled on a GPU, plain and Fabric end bit-identical; the Trainer, whose sanity check runs the compiled
    network for validation before its first training step, ended within last-bit differences of them on an H100
    (torch 2.11) but not equal. The bound is the README's: far below what changes a prediction. Not yet run on a
    GPU in this repo: gpu_check's compiled compare.py step records the measured gap."""
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "512", "--max_epochs", "3"]
    result = run_script(
        "compare.py", *flags, "--accelerator", "gpu", "--compile", "true", "--output_dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parity = json.loads((tmp_path / "compare.json").read_text())["parity"]
    assert parity["plain vs fabric"]["weights_equal"] and parity["plain vs fabric"]["losses_equal"]
    for pair, gap in parity.items():
        assert gap["max_weight_difference"] <= 1e-4 and gap["max_loss_difference"] <= 1e-4, (pair, gap)
        assert gap["max_test_difference"] <= 1e-3, (pair, gap)


# end with_ladder
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
    assert status["train.py --accelerator cpu --devices 1 --precision 16-mixed"] == "skipped"
    steps = ["devices.py", "train.py --accelerator cpu --devices 1 --precision bf16-mixed", "pytest -m gpu"]
    steps += ["evaluate.py", "predict.py", "export.py"]
    steps += ["train_fabric.py", "train_pytorch.py", "compare.py"]  # only with_ladder
    for step in steps:
        assert any(name.startswith(step) and state == "ok" for name, state in status.items()), step
    assert "| `devices.py` | ok |" in (tmp_path / "gpu_check_cpu.md").read_text()
    # with_ladder:
    compares = [step for step in results["steps"] if step["step"].startswith("compare.py")]
    assert [step["step"].endswith("--compile true --repeats 1") for step in compares] == [False, True]
    assert not any("plain vs fabric" in step["note"] for step in compares), compares  # not among those that differ
    assert all(step["note"].startswith("bit-identical") for step in compares), compares  # on the CPU, compiled too
    # end with_ladder


def test_gpu_check_without_a_gpu_says_to_use_cpu_mode(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_gpu_check(monkeypatch).main(["--results_dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "No CUDA GPU can be used here" in err and "--cpu" in err
    assert not list(tmp_path.iterdir())
