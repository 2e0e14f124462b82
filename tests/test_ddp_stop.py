"""SIGTERM to a two-process DDP run (gloo on the CPU), as a scheduler sends it: to the whole process group or to the
main process only, once or twice, at a random moment: as its processes start and join, or during the fit. Every
process must end within seconds with exit 143, the run saying once how to resume it (or to start it again) and no
process a traceback, the run folder free; the resumed run must end as one never stopped. On the tests' own task
(conftest.py's ``task``), started as ``python tests/command.py train`` (Lightning starts the second process with the
same command line)."""

import contextlib
import fcntl
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from interrupts import RESUME_LINE, ROOT, compare_runs, start, train_command, user_environment

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the run's processes through /proc"),
]

EPOCHS = 10
TRIES = 10  # Lightning 2.6 alone fails one stop in three or more: (2/3)**10 < 2 %
EARLY = 8  # as the processes start: Lightning 2.6 alone fails four in five
CHECKED = {0, 7}  # the tries resumed to the end and compared with an uninterrupted run


@pytest.fixture
def flags(task) -> list[str]:
    # own_data.Points' 360 training points: 180 a process, 23 steps an epoch of batches of 8.
    flags = ["--batch_size", "8", "--accelerator", "cpu", "--devices", "2", "--deterministic", "true"]
    return [*flags, "--enable_model_summary", "false", "--max_epochs", str(EPOCHS)]


def train(flags: list[str], run: Path) -> subprocess.Popen:
    # A session of its own, as a scheduler's job: its process group holds the run's every process.
    return subprocess.Popen(
        train_command(flags, run), cwd=ROOT, env=user_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
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


def stop(flags: list[str], run: Path, waited: str, pause: float, to_group: bool, twice: bool) -> str:
    """Start a run, wait for its line that starts with ``waited`` and ``pause`` seconds more (epochs, after the
    first epoch's line), send SIGTERM to its process group or its main process, once or twice; its output, once
    checked that every process ended as told and left the run folder free (or left none)."""
    process, rng = train(flags, run), random.Random(run.name)
    what = f"{run.name}: SIGTERM to the {'group' if to_group else 'main process'}{' twice' * twice}"
    try:
        output = ""
        for line in process.stdout:
            output += line
            if line.startswith(waited):
                break
        assert process.poll() is None, f"{what}: ended first:\n{output[-3000:]}"
        if waited.startswith("Epoch"):  # mid-fit, however fast this machine: "Epoch 1/10: ..., 0.4 s"
            pause *= max(float(line.split()[-2]), 0.1)
        time.sleep(pause)
        what += f", {pause:.2f} s after {waited!r}"
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
    return output


def resumes_exactly(output: str, run: Path, whole: Path) -> None:
    resume = start(RESUME_LINE.findall(output)[-1])
    _, stderr = resume.communicate(timeout=300)
    assert resume.returncode == 0, f"{run.name}: the resume failed:\n{stderr[-3000:]}"
    comparison = compare_runs(run, whole)
    assert comparison["max_weight_difference"] == 0.0, (run.name, comparison)
    assert all(interrupted == kept for interrupted, kept in comparison["scores"].values()), (run.name, comparison)
    assert comparison["history_epochs"] == list(range(EPOCHS)), (run.name, comparison)


def test_sigterm_stops_every_process_together_and_the_run_resumes_exactly(flags, tmp_path):
    whole = tmp_path / "whole"
    assert train(flags, whole).wait(timeout=300) == 0
    rng = random.Random(20806)
    for attempt in range(TRIES):
        run, epochs = tmp_path / f"run{attempt}", rng.uniform(0.5, 4.0)
        output = stop(flags, run, "Epoch 1/", epochs, to_group=attempt % 2 == 0, twice=attempt % 4 >= 2)
        if attempt in CHECKED:
            resumes_exactly(output, run, whole)


def test_sigterm_as_the_processes_start_stops_every_one_together(flags, tmp_path):
    """At a random moment from the Trainer's creation to the end of the first epoch: the other process is started,
    imports, builds its Trainer, joins the group (the main one waits for it in torch's C++, where no Python handler
    runs), sets up. Lightning 2.6 SIGKILLs every process as soon as one it started ends."""
    whole, times = tmp_path / "whole", {}
    process = train(flags, whole)
    for line in process.stdout:
        times.setdefault(line.split(":")[0], time.monotonic())
    assert process.wait(timeout=300) == 0
    span = times[f"Epoch 1/{EPOCHS}"] - times["GPU available"]  # (Lightning's first line, as the Trainer is built)
    rng, started_again, resumed = random.Random(34), False, False
    for attempt in range(EARLY):
        run, moment = tmp_path / f"run{attempt}", rng.uniform(0.0, 1.2 * span)
        output = stop(flags, run, "GPU available", moment, to_group=attempt % 3 < 2, twice=attempt % 2 == 1)
        if RESUME_LINE.search(output) and not resumed:
            resumes_exactly(output, run, whole)
            resumed = True
        elif "Run the same command again" in output and not started_again:  # as the run says: nothing was kept
            assert train(flags, run).wait(timeout=300) == 0, run.name
            started_again = True


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


def test_a_sigterm_to_one_process_during_the_test_stops_every_process_and_keeps_the_fit(flags, tmp_path):
    """Sent to the second process alone as it tests the best checkpoint (a scheduler stopping one task): every
    process stops after the same test batch, exit 143, one stop paragraph and no error of the connection the other
    process lost; the complete fit is kept, and the command it gives tests it."""
    run = tmp_path / "run"
    stop_there = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "test"]
    stop_there += ["--callbacks.rank", "1", "--callbacks.marker", str(tmp_path / "fired")]
    process = train([*flags, "--max_epochs", "2", *stop_there], run)
    output = process.communicate(timeout=300)[0]
    assert (tmp_path / "fired").is_file(), output[-3000:]
    assert process.returncode == 143 and output.count("Stopped by SIGTERM") == 1, output[-3000:]
    for failure in ("Traceback", "[rank1]", "Exception", "Connection", "Error"):
        assert failure not in output, output[-3000:]
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "metrics.json").exists()
    tested = start(RESUME_LINE.findall(output)[-1])
    _, stderr = tested.communicate(timeout=300)
    assert tested.returncode == 0 and (run / "metrics.json").is_file(), stderr[-3000:]
