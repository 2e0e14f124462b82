"""What can only break on a GPU, tested on every device: each test takes the device as a parameter, its cuda case
marked gpu (skipped without CUDA, see conftest.py) and its cpu case run everywhere, so that CI runs every test body
and a test of a removed mechanism fails there, not first on a GPU. In this process where it can, on the tests' own
task (conftest.py's ``task``): `pytest -m gpu` must fit the minutes a GPU is lent. The gpu-check command, which runs
the project as it is configured, is tested here too, its CPU mode (which CI runs) on it.
"""

import contextlib
import importlib
import json
import os
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import torch
from example import is_mnist_data
from helpers import FAKE_VAL, QUICK, STEPS_PER_EPOCH, train_run, write_fake_mnist

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


def task_objects(batch_size: int = 32):
    """The tests' own LightningModule and data module, built as train.py builds them (the module sized by the data)."""
    import own_data
    import tasks

    datamodule = own_data.Points(batch_size=batch_size)
    return tasks.Classify(datamodule.input_shape, datamodule.num_classes), datamodule


@pytest.mark.parametrize("device", DEVICES)
def test_train_on_one_device(task, tmp_path, device):
    metrics = train_run("--accelerator", ACCELERATOR[device], "--devices", "1", "--output_dir", str(tmp_path), *QUICK)
    assert metrics["accelerator"] == device and metrics["devices"] == 1 and metrics["test/acc"] > 0.9
    assert (metrics["peak_gpu_mb"] > 0) if device == "cuda" else metrics["peak_gpu_mb"] is None


@pytest.mark.parametrize("device", DEVICES)
def test_batches_reach_the_network_on_the_device(device):
    """The data module serves batches from host memory; Lightning moves each one to the device before the step."""
    from lightning.pytorch import Callback, Trainer

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
    model, datamodule = task_objects()
    trainer.fit(model, datamodule=datamodule)
    assert seen == [[(device, torch.float32), (device, torch.int64)]] * 2


@pytest.mark.parametrize(
    ("device", "precision"),
    [
        ("cpu", "bf16-mixed"),  # Lightning turns 16-mixed into bf16-mixed on the CPU
        pytest.param("cuda", "16-mixed", marks=gpu),
        pytest.param("cuda", "bf16-mixed", marks=gpu),
    ],
)
def test_trainer_mixed_precision(task, tmp_path, device, precision):
    if device == "cuda" and precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16 support")
    flags = ["--accelerator", ACCELERATOR[device], "--devices", "1", "--precision", precision]
    metrics = train_run(*flags, "--output_dir", str(tmp_path), *QUICK)
    assert metrics["precision"] == precision and metrics["accelerator"] == device and metrics["test/acc"] > 0.9


@pytest.mark.parametrize("device", DEVICES)
def test_no_host_sync_per_training_step(task, tmp_path, device):
    """Each epoch may sync a few times (the epoch's metrics come back, checkpoints are written); a step must not. The
    template's Trainer, as train.py builds it (its callbacks, checkpoints, logger), counted epoch by epoch."""
    from lightning.pytorch import Callback

    from mnist_lightning.core.cli import build, parse_args
    from mnist_lightning.core.runs import open_run

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

    config = parse_args([*QUICK, "--accelerator", ACCELERATOR[device], "--output_dir", str(tmp_path / "run")])
    with open_run(config) as run:
        training = build(config, run)
        training.trainer.callbacks.insert(0, CountSyncs())
        training.trainer.fit(training.model, datamodule=training.datamodule)
    assert len(per_epoch) == 2 and max(per_epoch) <= 5, f"{per_epoch} host syncs in epochs of {STEPS_PER_EPOCH} steps"


@pytest.mark.parametrize("device", DEVICES)
def test_epoch_times_wait_for_the_device(device):
    """EpochHistory reads the clock only once the device has finished: work still queued counts in the epoch."""
    from lightning.pytorch import Callback, Trainer

    from mnist_lightning.core.callbacks import EpochHistory

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
    model, datamodule = task_objects()
    trainer.fit(model, datamodule=datamodule)
    assert history.rows[0]["seconds"] >= 0.4


@pytest.fixture(scope="module")
def project_flags(tmp_path_factory) -> list[str]:
    """What the project's default configuration needs here (gpu_check.py checks the project as configured): for the
    MNIST example, small generated files in its format instead of a download; a data module of one's own that needs
    files gets them here, and its --expect bounds."""
    if is_mnist_data():
        data_dir = write_fake_mnist(tmp_path_factory.mktemp("mnist"))
        return ["--data.data_dir", str(data_dir), "--data.val_size", str(FAKE_VAL)]
    return ["--expect", "epochs>=1"]  # not the example's bar (its test/acc), which a task of one's own may not clear


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_step_and_skips_what_needs_cuda(project_flags, tmp_path, capsys, monkeypatch):
    """What CI runs: make gpu-check-cpu, on the project as it is configured (the example: on fake MNIST files)."""
    # The scripts it runs import this checkout's package.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    flags = ["--cpu", *project_flags, "--batch_size", "100", "--max_epochs", "2", "--results_dir", str(tmp_path)]
    gpu_check = load_gpu_check(monkeypatch)
    assert gpu_check.main(flags) == 0, capsys.readouterr()
    results = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    status = {step["step"]: step["status"] for step in results["steps"]}
    assert results["mode"] == "cpu" and results["failed"] == []
    steps = ["devices.py", "train.py --accelerator cpu --devices 1", "pytest -m gpu"]
    steps += ["evaluate.py", "predict.py", "export.py"]
    steps += ["compare.py"] * is_mnist_data()  # only with_ladder
    for step in steps:
        assert any(name.startswith(step) and state == "ok" for name, state in status.items()), step
    assert "| `devices.py` | ok |" in (tmp_path / "gpu_check_cpu.md").read_text()
    notes = {step["step"].split()[0]: step["note"] for step in results["steps"]}
    assert notes["train.py"].startswith("test/") and "fastest epoch" in notes["train.py"]  # what its test logged
    assert notes["evaluate.py"].startswith("test/") and "predict_dataloader" in notes["predict.py"]
    # with_ladder:
    compares = [step for step in results["steps"] if step["step"].startswith("compare.py")]
    if is_mnist_data():
        assert len(compares) == 1 and compares[0]["note"].startswith("bit-identical"), compares
    # end with_ladder


def test_gpu_check_checks_the_configured_data_module_and_the_models_metrics(task, tmp_path, capsys, monkeypatch):
    """Not MNIST by import: the data module train.py builds (here the tests' own, own_data.Points), its --data flags
    given to every step; the bar a trained run must clear is a metric it logs (--expect)."""
    gpu_check = load_gpu_check(monkeypatch)
    ran = []

    def run(command, **kwargs):
        ran.append(command)
        return subprocess.CompletedProcess(command, returncode=0, stdout="done\n", stderr="")

    monkeypatch.setattr(gpu_check.subprocess, "run", run)
    flags = ["--cpu", "--data.samples", "300", "--data.spread=0.5", "--expect", "test/loss<=0.2"]
    assert gpu_check.main([*flags, "--results_dir", str(tmp_path)]) == 1  # no step wrote what it checks
    results = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    assert results["settings"]["data"] == "Points" and results["settings"]["expect"] == ["test/loss<=0.2"]
    train = next(command for command in ran if command[1].endswith("train.py"))
    assert train[2:6] == ["--data.samples", "300", "--data.spread=0.5", "--max_epochs"]
    assert [step["status"] for step in results["steps"] if step["step"].startswith("compare.py")] in ([], ["skipped"])
    assert "train.py --accelerator cpu --devices 1" in results["failed"]  # its metrics.json: none
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(["--cpu", "--expect", "test/acc=0.9", "--results_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert (
        stop.value.code == 2
        and err == "Error: --expect test/acc=0.9: give METRIC>=VALUE or METRIC<=VALUE, e.g. test/acc>=0.9\n"
    )


def test_gpu_check_with_a_failed_step_exits_1_naming_it(project_flags, tmp_path, capsys, monkeypatch):
    gpu_check = load_gpu_check(monkeypatch)
    failing = subprocess.CompletedProcess([], returncode=3, stdout="", stderr="it broke")
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *args, **kwargs: failing)
    assert gpu_check.main(["--cpu", *project_flags, "--results_dir", str(tmp_path)]) == 1
    assert "step(s) failed: devices.py; train.py" in capsys.readouterr().err
    results = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    assert results["failed"] and results["steps"][0]["output_tail"] == "it broke"


def test_gpu_check_without_a_gpu_says_to_use_cpu_mode(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_gpu_check(monkeypatch).main(["--results_dir", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "No CUDA GPU can be used here" in err and "--cpu" in err
    assert not list(tmp_path.iterdir())
