"""Crashes and interruptions: kill -9 at random moments, Ctrl-C and SIGTERM; training always resumes."""

import json
import signal
import subprocess
import time

import pytest
from helpers import FAKE_VAL, train_run
from interrupts import checkpoint_loads, crash_and_resume, train_command

pytestmark = pytest.mark.slow


def long_run(data_dir) -> list[str]:
    return ["--data_dir", str(data_dir), "--val_size", str(FAKE_VAL), "--batch_size", "50", "--max_epochs", "100"]


def test_kill_9_at_five_random_moments_always_resumes(fake_mnist, tmp_path):
    flags = [*long_run(fake_mnist), "--seed", "3"]
    result = crash_and_resume(flags, tmp_path / "killed", kills=5, seed=1, max_delay=0.8)
    assert result["survived"] == 5, result["events"]
    uninterrupted = train_run(*flags, "--output_dir", str(tmp_path / "whole"), "--quiet", "true")
    assert abs(result["test/acc"] - uninterrupted["test/acc"]) <= 0.005
    history = json.loads((tmp_path / "killed" / "metrics.json").read_text())["history"]
    assert [row["epoch"] for row in history] == list(range(100))  # every epoch once, across all the restarts
    assert (tmp_path / "killed" / "logs" / "metrics.csv").exists()
    assert list((tmp_path / "killed").glob("logs/resume-*/metrics.csv"))


@pytest.mark.parametrize(("sent", "exit_code"), [(signal.SIGINT, 1), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_ctrl_c_and_sigterm_save_a_checkpoint_and_say_how_to_resume(fake_mnist, tmp_path, sent, exit_code):
    output_dir = tmp_path / "run"
    last = output_dir / "checkpoints" / "last.ckpt"
    process = subprocess.Popen(
        train_command(long_run(fake_mnist), output_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while process.poll() is None and not last.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(sent)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == exit_code, stderr[-2000:]
    assert "Resume with:" in stderr and "--ckpt_path last" in stderr and "Traceback" not in stderr
    assert checkpoint_loads(last)
