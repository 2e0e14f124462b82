"""End-to-end Lightning runs on the small fake MNIST: fit, test, records, loggers."""

import json
import os
import re
import select
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_RUN, one_line

from mnist_lightning.core.cli import build_training, parse_args
from mnist_lightning.core.train import main, train

ROOT = Path(__file__).resolve().parents[1]
METRIC_KEYS = {"test/acc", "test/loss", "epochs", "fit_seconds", "accelerator", "devices", "history", "seed"}


def run(data_dir, output_dir, *flags) -> dict:
    training = build_training(
        parse_args(["--data.data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_RUN, *flags])
    )
    return train(training)


def test_train_fits_tests_and_writes_metrics(fake_mnist, tmp_path):
    metrics = run(fake_mnist, tmp_path / "run", "--accelerator", "cpu", "--devices", "1")
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert METRIC_KEYS <= written.keys()
    assert written["test/acc"] == metrics["test/acc"] > 0.9  # the fake digits are easy: it must learn them
    assert (written["epochs"], written["accelerator"], written["devices"], written["seed"]) == (2, "cpu", 1, 42)
    assert [row["epoch"] for row in written["history"]] == [0, 1]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()
    assert metrics["best_checkpoint"].endswith(".ckpt")
    assert (tmp_path / "run" / "logs" / "metrics.csv").exists()


def test_the_best_checkpoint_is_tested(fake_mnist, tmp_path):
    metrics = run(fake_mnist, tmp_path / "run", "--max_epochs", "3")
    best_epoch = max(metrics["history"], key=lambda row: row["val/acc"])["epoch"]
    assert f"best-epoch{best_epoch:02d}" in metrics["best_checkpoint"]
    assert metrics["best_val/acc"] == pytest.approx(max(row["val/acc"] for row in metrics["history"]))


def test_main_returns_zero_and_prints_a_summary(fake_mnist, tmp_path, capsys):
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert "Test accuracy" in out and "% (best of 2 epochs). Run folder: " + str(tmp_path / "run") in out


@pytest.mark.parametrize(
    ("flags", "cores"),
    [
        ([], None),
        ([], 16),  # Lightning's warnings that count cores (num_workers) show on big machines only
        (["--precision", "bf16-mixed", "--log_every_n_steps", "50"], None),
        (["--precision", "bf16"], None),
    ],
)
def test_a_normal_run_prints_nothing_that_looks_like_an_error(fake_mnist, tmp_path, capfd, monkeypatch, flags, cores):
    if cores:
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    with warnings.catch_warnings(record=True) as shown:  # what a terminal would show (pytest keeps them)
        warnings.simplefilter("always")
        assert main(["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN, *flags]) == 0
    hidden = (DeprecationWarning, PendingDeprecationWarning)  # Python's defaults hide these, from libraries
    assert not [str(w.message) for w in shown if not issubclass(w.category, hidden)]
    err = capfd.readouterr().err.lower()
    for word in ("warning", "error", "traceback", "deprecat", "leak", "exists and is not empty", "tip:"):
        assert word not in err, err


@pytest.mark.parametrize("batches", ["true", "3"])
def test_fast_dev_run_is_a_smoke_test_that_leaves_no_trained_model(fake_mnist, tmp_path, batches):
    """A few batches of each stage (Lightning says so as it starts), recorded as such: no checkpoint or plot that
    looks like a trained model's."""
    run = tmp_path / "run"
    assert (
        main(["--data.data_dir", str(fake_mnist), "--output_dir", str(run), *TINY_RUN, "--fast_dev_run", batches]) == 0
    )
    assert yaml.safe_load((run / "config.yaml").read_text())["fast_dev_run"] == (True if batches == "true" else 3)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best_checkpoint"] is None and 0 <= metrics["test/acc"] <= 1
    assert not list(run.glob("**/*.ckpt")) and not list(run.glob("*.png"))


def test_a_used_output_dir_is_refused(fake_mnist, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text("{}")
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    assert main(flags) == 2
    assert "already holds files from an earlier run" in one_line(capsys.readouterr().err)


def test_a_lightning_logger_by_class_path_and_no_progress_or_summary(fake_mnist, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = ["--logger", "TensorBoardLogger", "--logger.save_dir", str(tmp_path / "tb")]
    run(fake_mnist, tmp_path / "run", *logger, "--enable_progress_bar", "false", "--enable_model_summary", "false")
    shown = "".join(capsys.readouterr())
    assert "Epoch 1" not in shown and "Total params" not in shown
    tags = set()
    for events in (tmp_path / "tb").rglob("events.out.tfevents.*"):
        tags |= set(EventAccumulator(str(events)).Reload().Tags()["scalars"])
    assert {"train/loss", "val/acc", "lr-Adam"} <= tags


def test_training_steps_do_not_read_values_back_from_the_device(fake_mnist, tmp_path, monkeypatch):
    """Reading a tensor's value (.item()) waits for a GPU to finish; no training step does it. (torch's Adam
    reads its step counter, which it keeps on the CPU for that reason, and the plots drawn once the run is over
    read the confusion matrix cell by cell: not counted.)"""
    reads = []
    item = torch.Tensor.item

    def counted_item(tensor):
        frames = traceback.extract_stack()
        if any("torch/optim/" in frame.filename for frame in frames[-4:]):
            return item(tensor)
        # with_plots:
        if any(frame.filename.endswith(os.path.join("mnist_lightning", "core", "plots.py")) for frame in frames):
            return item(tensor)
        # end with_plots
        reads.append(1)
        return item(tensor)

    monkeypatch.setattr(torch.Tensor, "item", counted_item)
    # 1,000 training images in batches of 10: 200 steps over 2 epochs, with the progress bar on.
    run(fake_mnist, tmp_path / "run", "--batch_size", "10", "--enable_progress_bar", "true")
    assert len(reads) < 100, f"{len(reads)} reads for 200 training steps"


def test_limit_test_batches_zero_trains_and_says_it_did_not_test(fake_mnist, tmp_path, capsys):
    assert (
        main(
            [
                "--data.data_dir",
                str(fake_mnist),
                "--output_dir",
                str(tmp_path / "run"),
                *TINY_RUN,
                "--limit_test_batches",
                "0",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["test/acc"] is None and "Not tested" in out and "Test accuracy" not in out


# train.py in a process where Python's typing cache held Union[float, int] when Lightning defined its Trainer (an
# import just before it can leave one; typing hands back an equal cached union for Union[int, float], in its order).
FLOAT_FIRST_TRAIN = """
import importlib, runpy, sys, typing
import lightning.pytorch as pl
for clear in typing._cleanups:
    clear()
typing.Optional[typing.Union[float, int]]
pl.Trainer = pl.trainer.Trainer = importlib.reload(sys.modules["lightning.pytorch.trainer.trainer"]).Trainer
sys.path.insert(0, "scripts")
sys.argv[0] = "scripts/train.py"
runpy.run_path("scripts/train.py", run_name="__main__")
"""


@pytest.mark.slow
def test_a_whole_number_of_batches_is_that_many_batches(fake_mnist, tmp_path):
    """--limit_train_batches 2 trains two batches an epoch, not a refused fraction 2.0 (nor 1 the whole epoch), from
    a flag or a config file; the record keeps the int. Lightning's Trainer takes an int as a number of batches."""
    config = tmp_path / "limits.yaml"
    config.write_text("limit_val_batches: 1\noverfit_batches: 0\n")
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    flags += ["--config", str(config), "--limit_train_batches", "2", "--limit_test_batches", "1"]
    result = subprocess.run(
        [sys.executable, "-c", FLOAT_FIRST_TRAIN, *flags], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    limits = [record[name] for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches")]
    assert limits == [2, 1, 1] and all(type(limit) is int for limit in limits), limits
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2 * 2


def test_without_validation_the_last_weights_are_tested_without_warnings(fake_mnist, tmp_path, capfd):
    flags = [
        "--data.data_dir",
        str(fake_mnist),
        "--output_dir",
        str(tmp_path / "run"),
        *TINY_RUN,
        "--limit_val_batches",
        "0",
    ]
    assert main(flags) == 0
    out, err = capfd.readouterr()
    assert "Warning" not in err and "could not find the monitored key" not in err
    assert "% (last of 2 epochs). Run folder: " in out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["best_checkpoint"].endswith("last.ckpt") and metrics["test/acc"] is not None
    assert [path.name for path in (tmp_path / "run" / "checkpoints").iterdir()] == ["last.ckpt"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the note is about a machine without a usable GPU")
def test_a_compiled_cpu_run_prints_nothing_that_looks_like_an_error(fake_mnist, tmp_path):
    # A CUDA toolkit (here CUDA_HOME) on a machine with no GPU makes torch's compiler log "No CUDA runtime is
    # found" at WARNING level. With its own empty compilation cache, as a first run on a new machine.
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN, "--compile", "true"]
    env = os.environ | {"CUDA_HOME": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "mnist_lightning.core.train", *flags]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    err = result.stderr.lower()
    for word in ("warning", "error", "traceback", "no cuda runtime"):
        assert word not in err, result.stderr
    assert not re.search(r"^[WE]\d{4} ", result.stderr, flags=re.MULTILINE), result.stderr  # torch's log lines


def script_command(fake_mnist, output_dir) -> list[str]:
    """scripts/train.py in its own process, as a user starts it, with a progress display (TINY_RUN turns it off)."""
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(output_dir), *TINY_RUN[:-2], "--batch_size", "10"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, os.path.join(root, "scripts", "train.py"), *flags]


def script_run(fake_mnist, output_dir, stdout, stderr) -> subprocess.CompletedProcess:
    return subprocess.run(script_command(fake_mnist, output_dir), stdout=stdout, stderr=stderr, timeout=300)


@pytest.mark.slow
def test_output_to_a_file_gets_one_line_per_epoch(fake_mnist, tmp_path):
    """nohup, SLURM, CI logs: no bar redraws, but a line as each epoch ends."""
    with open(tmp_path / "log.txt", "w") as log:
        assert script_run(fake_mnist, tmp_path / "run", log, subprocess.STDOUT).returncode == 0
    text = (tmp_path / "log.txt").read_text()
    lines = re.findall(r"^Epoch (\d)/2: train/loss [\d.]+, val/loss [\d.]+, val/acc [\d.]+, [\d.]+ s$", text, re.M)
    assert lines == ["1", "2"], text
    history = json.loads((tmp_path / "run" / "metrics.json").read_text())["history"]
    shown = [float(value) for value in re.findall(r"train/loss ([\d.]+)", text)]
    assert shown == [round(row["train/loss"], 4) for row in history]  # the epoch's own loss, not the one before
    assert "\r" not in text and "it/s" not in text


@pytest.mark.slow
def test_a_terminal_gets_a_bar_and_no_epoch_lines(fake_mnist, tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 120 columns: a bar fits
    # Read while the run goes on, as a terminal does: a terminal holds only a few kB (16 kB here) that nobody has
    # read, and the bars' redraws come to more, so a run whose output is read only at its end would wait forever.
    process = subprocess.Popen(script_command(fake_mnist, tmp_path / "run"), stdout=follower, stderr=follower)
    os.close(follower)
    output = b""
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if not select.select([leader], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            output += chunk
        returncode = process.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        process.kill()
        os.close(leader)
    text = output.decode(errors="replace")
    assert returncode == 0, text[-3000:]
    assert "it/s" in text and "Epoch 1:" in text  # Lightning's TQDM bar, epochs counted from 0
    assert not re.search(r"^Epoch \d/2:", text, re.M)


def test_a_run_without_its_last_ckpt_says_what_its_kept_weights_can_do(fake_mnist, tmp_path, capsys):
    run(fake_mnist, tmp_path / "run")
    (tmp_path / "run" / "checkpoints" / "last.ckpt").unlink()  # deleted by hand, say, to save space
    assert main(["--output_dir", str(tmp_path / "run"), "--ckpt_path", "last", "--max_epochs", "4"]) == 2
    message = one_line(capsys.readouterr().err)
    assert f"{tmp_path / 'run' / 'checkpoints' / 'last.ckpt'} is gone" in message and "Traceback" not in message
    assert "evaluate.py" in message and "--ckpt_path" in message
    assert list((tmp_path / "run" / "checkpoints").glob("best-*.ckpt"))  # kept, for those commands


def test_a_run_after_one_stopped_by_sigterm_in_the_same_process_is_not_stopped(fake_mnist, tmp_path):
    """In one Python process (a notebook, a sweep): the SIGTERM that stopped a run is not taken for the next one's."""
    flags = ["--data.data_dir", str(fake_mnist), *TINY_RUN]
    stop = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "batch"]
    assert main([*flags, "--output_dir", str(tmp_path / "a"), *stop, "--callbacks.marker", str(tmp_path / "m")]) == 143
    assert main([*flags, "--output_dir", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "metrics.json").is_file()


def test_fit_seconds_count_the_fit_and_not_the_test(fake_mnist, tmp_path, monkeypatch):
    """The test after the fit is not fit time (and loading the best checkpoint for it restores the callbacks' state
    with an earlier epoch's count, on Lightning 2.6.0): metrics.json's fit_seconds is taken before the test."""
    from lightning.pytorch import Trainer

    from mnist_lightning.core import callbacks

    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock[0])  # a clock this test moves
    test = Trainer.test

    def test_taking_an_hour(self, *args, **kwargs):
        clock[0] += 3600.0
        return test(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "test", test_taking_an_hour)
    metrics = run(fake_mnist, tmp_path / "run", "--accelerator", "cpu")
    assert metrics["fit_seconds"] == json.loads((tmp_path / "run" / "metrics.json").read_text())["fit_seconds"]
    assert metrics["fit_seconds"] < 3600.0
