"""End-to-end training runs on the tests' own task (tasks.Classify on own_data.Points): fit, test, records, loggers,
the progress display."""

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
from helpers import QUICK, ROOT, STEPS_PER_EPOCH, command, command_environment, one_line, train_run

from mnist_lightning.core.train import main

METRIC_KEYS = {"test/acc", "test/loss", "best_val/acc", "best_checkpoint", "epochs", "fit_seconds", "history", "seed"}
METRIC_KEYS |= {"accelerator", "devices", "num_nodes", "precision", "batch_size", "peak_gpu_mb"}


def run(output_dir, *flags) -> dict:
    return train_run("--output_dir", str(output_dir), *QUICK, *flags)


def train(output_dir, *flags) -> int:
    return main(["--output_dir", str(output_dir), *QUICK, *flags])


def test_train_fits_tests_and_writes_metrics(task, tmp_path):
    metrics = run(tmp_path / "run", "--accelerator", "cpu", "--devices", "1")
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert METRIC_KEYS <= written.keys(), written.keys()
    assert written["test/acc"] == metrics["test/acc"] > 0.9  # three well separated clusters: it must learn them
    assert (written["epochs"], written["accelerator"], written["devices"], written["seed"]) == (2, "cpu", 1, 42)
    assert (written["batch_size"], written["precision"], written["num_nodes"]) == (32, "32-true", 1)
    assert [row["epoch"] for row in written["history"]] == [0, 1]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()
    assert metrics["best_checkpoint"].endswith(".ckpt") and Path(metrics["best_checkpoint"]).is_file()
    assert (tmp_path / "run" / "logs" / "version_0" / "metrics.csv").exists()  # Lightning's CSVLogger


def test_every_scalar_the_model_logs_is_in_the_history_sorted_by_name(task, tmp_path):
    """The history holds what the task logs (and the learning rate, logged by LearningRateMonitor), not a list of
    names that core/ knows."""
    metrics = run(tmp_path / "run", "--log_every_n_steps", "5")
    for row in metrics["history"]:
        names = [name for name in row if name not in ("epoch", "seconds")]
        assert names == sorted(names) and {"train/loss", "val/acc", "val/loss", "lr-Adam"} <= set(names), row


def test_the_best_checkpoint_is_tested(task, tmp_path):
    metrics = run(tmp_path / "run", "--max_epochs", "3", "--batch_size", "128")
    best = max(metrics["history"], key=lambda row: row["val/acc"])  # the first of equals, as ModelCheckpoint keeps
    assert Path(metrics["best_checkpoint"]).name == f"best-epoch{best['epoch']:02d}-acc{best['val/acc']:.4f}.ckpt"
    assert metrics["best_val/acc"] == pytest.approx(best["val/acc"])
    tested = torch.load(metrics["best_checkpoint"], weights_only=True)
    assert tested["epoch"] == best["epoch"]


def test_main_returns_zero_and_prints_a_summary(task, tmp_path, capsys):
    assert train(tmp_path / "run") == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    scores = f"test/loss {metrics['test/loss']:.4f}, test/acc {metrics['test/acc']:.4f}"
    assert f"\nTested the best of 2 epochs: {scores}. Run folder: {tmp_path / 'run'}\n" in out, out


@pytest.mark.parametrize(
    "flags",
    [[], ["--precision", "bf16-mixed", "--log_every_n_steps", "50"], ["--precision", "bf16"]],
    ids=["default", "bf16-mixed", "bf16"],
)
def test_a_normal_run_prints_nothing_that_looks_like_an_error(task, tmp_path, capfd, monkeypatch, flags):
    # Two cores, whatever the machine: Lightning advises more DataLoader workers where there are more, which is
    # advice about the data module (the example's, which reads from memory, answers it: tests/test_example_train.py).
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with warnings.catch_warnings(record=True) as shown:  # what a terminal would show (pytest keeps them)
        warnings.simplefilter("always")
        assert train(tmp_path / "run", *flags) == 0
    hidden = (DeprecationWarning, PendingDeprecationWarning)  # Python's defaults hide these, from libraries
    assert not [str(w.message) for w in shown if not issubclass(w.category, hidden)]
    err = capfd.readouterr().err.lower()
    for word in ("warning", "error", "traceback", "deprecat", "leak", "exists and is not empty", "tip:"):
        assert word not in err, err


@pytest.mark.parametrize("batches", ["true", "3"])
def test_fast_dev_run_is_a_smoke_test_that_leaves_no_trained_model(task, tmp_path, batches):
    """A few batches of each stage (Lightning says so as it starts), recorded as such: no checkpoint or plot that
    looks like a trained model's."""
    run_dir = tmp_path / "run"
    assert train(run_dir, "--fast_dev_run", batches) == 0
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["fast_dev_run"] == (True if batches == "true" else 3)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best_checkpoint"] is None and 0 <= metrics["test/acc"] <= 1
    assert not list(run_dir.glob("**/*.ckpt")) and not list(run_dir.glob("*.png"))


def test_a_used_output_dir_is_refused(task, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text("{}")
    assert train(tmp_path / "run") == 2
    assert "already holds files from an earlier run" in one_line(capsys.readouterr().err)
    assert (tmp_path / "run" / "metrics.json").read_text() == "{}"


def test_a_lightning_logger_by_class_path_and_no_progress_or_summary(task, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = ["--logger", "TensorBoardLogger", "--logger.save_dir", str(tmp_path / "tb")]
    run(tmp_path / "run", *logger, "--enable_progress_bar", "false", "--enable_model_summary", "false")
    shown = "".join(capsys.readouterr())
    assert "Epoch 1" not in shown and "Total params" not in shown
    tags = set()
    for events in (tmp_path / "tb").rglob("events.out.tfevents.*"):
        tags |= set(EventAccumulator(str(events)).Reload().Tags()["scalars"])
    assert {"train/loss", "val/acc", "lr-Adam"} <= tags
    assert not (tmp_path / "run" / "logs").exists()  # the logger given replaces the CSV one


def test_tensorboard_logs_in_the_run_folder_each_segment_in_a_version_of_its_own(task, tmp_path):
    pytest.importorskip("tensorboard")
    run(tmp_path / "run", "--logger", "tensorboard", "--max_epochs", "1")
    run(tmp_path / "run", "--ckpt_path", "last", "--max_epochs", "2")  # the resume keeps the run's logger
    for version in ("version_0", "version_1"):
        assert list((tmp_path / "run" / "logs" / version).glob("events.out.tfevents.*")), version


def test_training_steps_do_not_read_values_back_from_the_device(task, tmp_path, monkeypatch):
    """Reading a tensor's value (.item()) waits for a GPU to finish; no training step of the machinery does it.
    (torch's Adam reads its step counter, which it keeps on the CPU for that reason, and the plots drawn once the run
    is over read their values: not counted.)"""
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
    # 360 training points in batches of 6: 120 steps over 2 epochs, with the progress bar on.
    run(tmp_path / "run", "--batch_size", "6", "--enable_progress_bar", "true")
    assert len(reads) < 60, f"{len(reads)} reads for 120 training steps"


def test_limit_test_batches_zero_trains_and_says_it_did_not_test(task, tmp_path, capsys):
    assert train(tmp_path / "run", "--limit_test_batches", "0") == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert not [name for name in metrics if name.startswith("test/")] and metrics["epochs"] == 2
    assert f"\nNot tested. Run folder: {tmp_path / 'run'}\n" in out and "Tested" not in out


# train.py in a process where Python's typing cache held Union[float, int] when Lightning defined its Trainer (an
# import just before it can leave one; typing hands back an equal cached union for Union[int, float], in its order).
FLOAT_FIRST_TRAIN = """
import importlib, runpy, sys, typing
import lightning.pytorch as pl
for clear in typing._cleanups:
    clear()
typing.Optional[typing.Union[float, int]]
pl.Trainer = pl.trainer.Trainer = importlib.reload(sys.modules["lightning.pytorch.trainer.trainer"]).Trainer
sys.argv[0] = "tests/command.py"
runpy.run_path("tests/command.py", run_name="__main__")
"""


@pytest.mark.slow
def test_a_whole_number_of_batches_is_that_many_batches(task, tmp_path):
    """--limit_train_batches 2 trains two batches an epoch, not a refused fraction 2.0 (nor 1 the whole epoch), from
    a flag or a config file; the record keeps the int. Lightning's Trainer takes an int as a number of batches."""
    config = tmp_path / "limits.yaml"
    config.write_text("limit_val_batches: 1\noverfit_batches: 0\n")
    flags = ["--output_dir", str(tmp_path / "run"), *QUICK]
    flags += ["--config", str(config), "--limit_train_batches", "2", "--limit_test_batches", "1"]
    result = subprocess.run(
        [sys.executable, "-c", FLOAT_FIRST_TRAIN, "train", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=command_environment(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    limits = [record[name] for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches")]
    assert limits == [2, 1, 1] and all(type(limit) is int for limit in limits), limits
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2 * 2


def test_without_validation_the_last_weights_are_tested_without_warnings(task, tmp_path, capfd):
    assert train(tmp_path / "run", "--limit_val_batches", "0") == 0
    out, err = capfd.readouterr()
    assert "warning" not in err.lower() and "could not find the monitored key" not in err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    scores = f"test/loss {metrics['test/loss']:.4f}, test/acc {metrics['test/acc']:.4f}"
    assert f"\nTested the last of 2 epochs: {scores}. Run folder: " in out
    assert "best_val/acc" not in metrics or metrics["best_val/acc"] is None
    assert [path.name for path in (tmp_path / "run" / "checkpoints").iterdir()] == ["last.ckpt"]
    # The weights tested are the last ones: those of last.ckpt.
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["epoch"] == 1 and last["global_step"] == 2 * STEPS_PER_EPOCH


def test_without_validation_metrics_json_names_the_checkpoint_tested(task, tmp_path):
    """metrics.json's best_checkpoint is the checkpoint tested (README): without validation, last.ckpt."""
    metrics = run(tmp_path / "run", "--limit_val_batches", "0")
    assert metrics["best_checkpoint"] == str(tmp_path / "run" / "checkpoints" / "last.ckpt")


def process_command(output_dir) -> list:
    """The train command in its own process, as a user starts it, with a progress display (QUICK turns it off)."""
    return command("train", "--output_dir", str(output_dir), *QUICK[:-2], "--batch_size", "10")


@pytest.mark.slow
def test_output_to_a_file_gets_one_line_per_epoch(task, tmp_path):
    """nohup, SLURM, CI logs: no bar redraws, but a line as each epoch ends, of every metric the task logs."""
    with open(tmp_path / "log.txt", "w") as log:
        ended = subprocess.run(
            process_command(tmp_path / "run"),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=300,
            env=command_environment(),
        )
    text = (tmp_path / "log.txt").read_text()
    assert ended.returncode == 0, text[-3000:]
    lines = re.findall(r"^Epoch \d/2: .*$", text, re.M)
    history = json.loads((tmp_path / "run" / "metrics.json").read_text())["history"]
    assert len(lines) == len(history) == 2, text
    for line, row in zip(lines, history, strict=True):  # each epoch's own values, not the ones before
        shown = "".join(f"{name} {value:.4f}, " for name, value in row.items() if name not in ("epoch", "seconds"))
        assert re.fullmatch(rf"Epoch {row['epoch'] + 1}/2: {re.escape(shown)}[\d.]+ s", line), (line, row)
        assert "train/loss" in shown and "val/acc" in shown
    assert "\r" not in text and "it/s" not in text


@pytest.mark.slow
def test_a_terminal_gets_a_bar_and_no_epoch_lines(task, tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 120 columns: a bar fits
    # Read while the run goes on, as a terminal does: a terminal holds only a few kB (16 kB here) that nobody has
    # read, and the bars' redraws come to more, so a run whose output is read only at its end would wait forever.
    process = subprocess.Popen(
        process_command(tmp_path / "run"), stdout=follower, stderr=follower, env=command_environment()
    )
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


def test_a_run_without_its_last_ckpt_says_what_its_kept_weights_can_do(task, tmp_path, capsys):
    run(tmp_path / "run")
    (tmp_path / "run" / "checkpoints" / "last.ckpt").unlink()  # deleted by hand, say, to save space
    assert main(["--output_dir", str(tmp_path / "run"), "--ckpt_path", "last", "--max_epochs", "4"]) == 2
    message = one_line(capsys.readouterr().err)
    assert f"{tmp_path / 'run' / 'checkpoints' / 'last.ckpt'} is gone" in message and "Traceback" not in message
    (best,) = (tmp_path / "run" / "checkpoints").glob("best-*.ckpt")  # kept, for those commands
    assert f"evaluate.py --ckpt_path {best}" in message and f"train.py --ckpt_path {best}" in message


def test_a_run_after_one_stopped_by_sigterm_in_the_same_process_is_not_stopped(task, tmp_path, capsys):
    """In one Python process (a notebook, a sweep): the SIGTERM that stopped a run is not taken for the next one's."""
    stop = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "batch"]
    assert train(tmp_path / "a", *stop, "--callbacks.marker", str(tmp_path / "m")) == 143
    assert "Stopped by SIGTERM: " in one_line(capsys.readouterr().err)
    assert train(tmp_path / "b") == 0
    assert (tmp_path / "b" / "metrics.json").is_file()


def test_fit_seconds_count_the_fit_and_not_the_test(task, tmp_path, monkeypatch):
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
    metrics = run(tmp_path / "run", "--accelerator", "cpu")
    assert metrics["fit_seconds"] == json.loads((tmp_path / "run" / "metrics.json").read_text())["fit_seconds"]
    assert metrics["fit_seconds"] < 3600.0
