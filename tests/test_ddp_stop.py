"""SIGTERM to a two-process DDP run (gloo on the CPU), as a scheduler sends it: to the whole process group or to the
main process only, once or twice, at a random moment of the fit (or of its setup). Every process must end within
seconds with exit 143, the run saying once how to resume it and no process a traceback, the run folder free; the
resumed run must end as one never stopped."""

import contextlib
import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import FAKE_VAL
from interrupts import RESUME_LINE, ROOT, compare_runs, start, user_environment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the run's processes through /proc"),
]

EPOCHS = 10
TRIES = 10  # Lightning 2.6 alone fails one stop in three or more: (2/3)**10 < 2 %
SETUP = 2  # more tries, as the other process joins the fit (before Lightning's own SIGTERM handling)
CHECKED = {0, 7}  # the tries resumed to the end and compared with an uninterrupted run


@pytest.fixture(scope="module")
def flags(fake_mnist) -> list[str]:
    flags = ["--data.data_dir", str(fake_mnist), "--data.val_size", str(FAKE_VAL), "--batch_size", "8"]
    flags += ["--accelerator", "cpu", "--devices", "2", "--deterministic", "true", "--enable_model_summary", "false"]
    return [*flags, "--max_epochs", str(EPOCHS)]


def train(flags: list[str], run: Path) -> subprocess.Popen:
    # A session of its own, as a scheduler's job: its process group holds the run's every process.
    command = [sys.executable, "scripts/train.py", *flags, "--output_dir", str(run)]
    return subprocess.Popen(
        command, cwd=ROOT, env=user_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def running(run: Path) -> list[str]:
    """The command lines of this machine's processes that name ``run``: a process that ended names nothing, even
    while it waits, a zombie, for a reaper that a container may lack."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # a process that ended meanwhile
            continue
        found += [line] * (str(run) in line)
    return found


def folder_free(run: Path) -> bool:
    with open(run / ".lock") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def test_sigterm_stops_every_process_together_and_the_run_resumes_exactly(flags, tmp_path):
    whole = tmp_path / "whole"
    assert train(flags, whole).wait(timeout=300) == 0
    rng = random.Random(20806)
    for attempt in range(TRIES + SETUP):
        to_group, twice, moment = attempt % 2 == 0, attempt % 4 >= 2, rng.uniform(0.5, 4.0)
        what = f"try {attempt}: SIGTERM to the {'group' if to_group else 'main process'}{' twice' * twice}"
        what += f", {moment:.2f} epochs after the first" if attempt < TRIES else ", as the fit sets up"
        waited = "Epoch 1/" if attempt < TRIES else "Initializing distributed: GLOBAL_RANK: 1"
        run = tmp_path / f"run{attempt}"
        process = train(flags, run)
        try:
            output = ""
            for line in process.stdout:
                output += line
                if line.startswith(waited):  # "Epoch 1/10: train/loss ..., 0.4 s"
                    break
            assert process.poll() is None, f"{what}: ended first:\n{output[-3000:]}"
            if attempt < TRIES:
                time.sleep(moment * max(float(line.split()[-2]), 0.1))  # mid-fit, however fast this machine
            for _ in range(1 + twice):
                (os.killpg if to_group else os.kill)(process.pid, signal.SIGTERM)
                time.sleep(rng.uniform(0.0, 0.3))
            try:
                output += process.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:
                pytest.fail(f"{what}: still running a minute later:\n{output[-3000:]}")
            deadline = time.monotonic() + 30
            while running(run) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not running(run), f"{what}: a process outlived the main one: {running(run)}"
        finally:
            with contextlib.suppress(ProcessLookupError):  # none left training after the test
                os.killpg(process.pid, signal.SIGKILL)
        assert process.returncode == 143, f"{what}: exit {process.returncode}\n{output[-3000:]}"
        assert output.count("Stopped by SIGTERM") == 1, f"{what}:\n{output[-3000:]}"
        for failure in ("Traceback", "[rank1]", "Exception"):  # Python's, torch's for a rank, its C++ layer's
            assert failure not in output, f"{what}:\n{output[-3000:]}"
        assert not run.exists() or folder_free(run), what  # a new run stopped before its first epoch leaves none
        if attempt in CHECKED:
            resume = start(RESUME_LINE.findall(output)[-1])
            _, stderr = resume.communicate(timeout=300)
            assert resume.returncode == 0, f"{what}: the resume failed:\n{stderr[-3000:]}"
            comparison = compare_runs(run, whole)
            assert comparison["max_weight_difference"] == 0.0, (what, comparison)
            assert comparison["test/acc"][0] == comparison["test/acc"][1], (what, comparison)
            assert comparison["history_epochs"] == list(range(EPOCHS)), (what, comparison)


def test_a_sigterm_after_the_last_batch_stops_every_process_before_the_test(flags, tmp_path):
    """Sent as the fit ends (after its last check for one), to one process or both: no process tests."""
    run = tmp_path / "run"
    options = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "fit_end"]
    process = train([*flags, "--max_epochs", "2", *options, "--callbacks.marker", str(tmp_path / "fired")], run)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 143 and output.count("Stopped by SIGTERM") == 1, output[-3000:]
    assert "Traceback" not in output and not (run / "metrics.json").exists() and folder_free(run)
    resume = start(RESUME_LINE.findall(output)[-1])
    _, stderr = resume.communicate(timeout=300)
    assert resume.returncode == 0 and (run / "metrics.json").is_file(), stderr[-3000:]
