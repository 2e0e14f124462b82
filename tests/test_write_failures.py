"""A write that fails (a full disk) ends in one message naming the file and the cause; the last good last.ckpt is
kept, and the resume command printed works once there is room. On the tests' own task."""

import csv
import errno
import json
import os
import resource
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import QUICK, ROOT, command, command_environment, one_line, own_task

from mnist_lightning.core import cli, export
from mnist_lightning.core import train as train_module
from mnist_lightning.core.records import write_json
from mnist_lightning.core.train import main

FULL = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def fault():
    """Patches that inject a fault: ``fault.undo()`` gives the room back, and leaves the ``task`` fixture's patches."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def often_written_logs(fault) -> None:
    """Lightning's CSV logger writes its rows every 100 steps (and at the end): every 5 here, in runs of a few dozen."""
    fault.setattr(cli, "CSVLogger", partial(cli.CSVLogger, flush_logs_every_n_steps=5))


def resume_command(message: str) -> list[str]:
    """The arguments of the resume command a message gives, after its ``python scripts/train.py``."""
    words = message.split("Resume with: ")[1].split()
    return words[words.index("--output_dir") :]


def test_a_full_disk_while_saving_a_checkpoint(task, tmp_path, capsys, fault):
    """The disk fills as the third checkpoint is written: where a full disk shows, after its bytes were written."""
    saves = []
    real_save, real_fsync = torch.save, os.fsync

    def save(obj, file, *args, **kwargs):
        saves.append(file)
        return real_save(obj, file, *args, **kwargs)

    def fsync(fd):
        if len(saves) >= 3:
            raise FULL
        return real_fsync(fd)

    fault.setattr(os, "fsync", fsync)
    fault.setattr(torch, "save", save)
    run = tmp_path / "run"
    flags = [*QUICK, "--max_epochs", "3"]
    assert main([*flags, "--output_dir", str(run)]) == 1
    message = one_line(capsys.readouterr().err)
    assert message.startswith("Error: ") and "could not be written: No space left on device" in message, message
    assert "last.ckpt holds the epochs finished before" in message and "Traceback" not in message
    assert not list(run.glob("checkpoints/.*partial"))
    fault.undo()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    assert main(resume_command(message)) == 0


def test_a_full_disk_while_rows_are_appended_to_the_csv_log(task, tmp_path, capsys, fault):
    """Later in the run, when every column exists, Lightning appends its rows."""
    run = tmp_path / "run"
    real_writerows = csv.DictWriter.writerows

    def writerows(writer, rows):
        last = run / "checkpoints" / "last.ckpt"
        if last.is_file() and torch.load(last, weights_only=True)["epoch"] >= 1:  # epoch 0's columns are all there
            writer.writer.writerow(["half a row"])
            raise FULL
        return real_writerows(writer, rows)

    fault.setattr(csv.DictWriter, "writerows", writerows)
    often_written_logs(fault)
    assert main([*QUICK, "--max_epochs", "3", "--output_dir", str(run)]) == 1
    message = one_line(capsys.readouterr().err)
    assert message.startswith("Error: ") and "could not be written: No space left on device" in message, message
    assert "last.ckpt holds the epochs finished before" in message and "Traceback" not in message
    fault.undo()
    assert main(resume_command(message)) == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3


def test_a_full_disk_while_lightning_writes_the_csv_log(task, tmp_path, capsys, fault):
    """The disk fills once the first checkpoint is written, as the CSV logger writes its log mid-run."""
    run = tmp_path / "run"
    log = run / "logs" / "version_0" / "metrics.csv"
    real_writerows = csv.DictWriter.writerows

    def writerows(writer, rows):
        if (run / "checkpoints" / "last.ckpt").is_file():
            writer.writer.writerow(["half a row"])  # what the disk took
            raise FULL
        return real_writerows(writer, rows)

    fault.setattr(csv.DictWriter, "writerows", writerows)
    often_written_logs(fault)
    flags = QUICK
    assert main([*flags, "--output_dir", str(run)]) == 1
    message = one_line(capsys.readouterr().err)
    assert message.startswith("Error: ") and "Traceback" not in message, message
    assert "could not be written: No space left on device" in message
    assert "last.ckpt holds the epochs finished before" in message
    assert log.is_file()
    fault.undo()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    assert main(resume_command(message)) == 0
    assert [row["epoch"] for row in json.loads((run / "metrics.json").read_text())["history"]] == [0, 1]
    # Resumed to train longer, the disk full again: the earlier segment's metrics.json does not make it complete.
    fault.setattr(csv.DictWriter, "writerows", writerows)
    often_written_logs(fault)
    assert main([*resume_command(message), "--max_epochs", "3"]) == 1
    again = one_line(capsys.readouterr().err)
    assert "last.ckpt holds the epochs finished before. Resume with" in again and "complete" not in again, again


def test_a_full_disk_while_lightning_writes_the_csv_log_is_the_oss_reason_and_what_the_run_kept(
    task, tmp_path, capsys, fault
):
    """Lightning's own CSVLogger writes the log: the error boundary says the OS's reason (its write names no file)
    and what the run kept; the resume command it prints works once there is room."""
    run = tmp_path / "run"
    real_writerows = csv.DictWriter.writerows

    def writerows(writer, rows):
        if (run / "checkpoints" / "last.ckpt").is_file():
            raise FULL
        return real_writerows(writer, rows)

    fault.setattr(csv.DictWriter, "writerows", writerows)
    often_written_logs(fault)
    assert main([*QUICK, "--output_dir", str(run)]) == 1
    message = one_line(capsys.readouterr().err)
    assert (
        message.startswith("Error: A file could not be written: No space left on device.")
        and "Traceback" not in message
    )
    assert "last.ckpt holds the epochs finished before. Resume with" in message, message
    fault.undo()
    assert main([*resume_command(message), "--max_epochs", "3"]) == 0


def test_a_run_past_a_file_size_limit(task, tmp_path, capsys):
    """`ulimit -f 40`: its first checkpoint is larger (a network of 2,000 hidden units: 48 kB of weights, twice that of
    Adam's state); the message names the limit, not a full disk."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40 * 1024, limits[1]))
    try:
        code = main([*QUICK, "--net.hidden", "2000", "--output_dir", str(tmp_path / "run")])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    message = one_line(capsys.readouterr().err)
    assert code == 1 and ".ckpt could not be written: File too large" in message
    assert "No space left" not in message and "enable_checkpointing" not in message  # its first checkpoint's
    assert "nothing to resume" in message, message


def test_a_fit_without_checkpoints_whose_metrics_json_cannot_be_written_leaves_no_folder(task, tmp_path, capsys, fault):
    """`train.py --enable_checkpointing false` onto a disk that fills as the fit ends: metrics.json, its first
    write after the fit, fails. Nothing holds the fit to resume or test: the new run is removed whole, and the same
    command runs it again."""
    run, limits = tmp_path / "run", resource.getrlimit(resource.RLIMIT_FSIZE)
    flags = QUICK

    def onto_a_full_disk(path, data):
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, limits[1]))  # `ulimit -f 0`: every write fails from now on
        write_json(path, data)

    fault.setattr(train_module, "write_json", onto_a_full_disk)
    try:
        code = main([*flags, "--enable_checkpointing", "false", "--output_dir", str(run)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    message = one_line(capsys.readouterr().err)
    assert code == 1 and f"{run / 'metrics.json'} could not be written" in message, message
    assert "nothing to resume" in message and "Run the same command again" in message and "Traceback" not in message
    assert not run.exists()
    fault.undo()
    assert main([*flags, "--enable_checkpointing", "false", "--output_dir", str(run)]) == 0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    run = tmp_path_factory.mktemp("export") / "run"
    with own_task():
        assert main([*QUICK, "--output_dir", str(run)]) == 0
    return str(run / "checkpoints" / "last.ckpt")


def test_an_export_into_an_existing_file_is_refused_and_writes_nothing(task, checkpoint, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert export.main(["--ckpt_path", checkpoint, "--output_dir", str(tmp_path / "a_file")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "a_file cannot be written: File exists" in err and "Traceback" not in err
    assert "Pass another --output_dir" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_file"] and not (tmp_path / "a_file").read_text()


def exported(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.name != ".lock"}  # .lock: who holds it


def test_an_export_onto_a_full_disk_keeps_the_earlier_export(task, checkpoint, tmp_path, capsys, fault):
    flags = ["--ckpt_path", checkpoint, "--output_dir", str(tmp_path / "exports"), "--formats", "pt2"]
    assert export.main(flags) == 0
    earlier = exported(tmp_path / "exports")

    def fsync(fd):  # where a full disk shows, after the file's bytes were written
        raise FULL

    fault.setattr(os, "fsync", fsync)
    assert export.main(flags) == 1
    message = one_line(capsys.readouterr().err)
    assert f"Error: {tmp_path / 'exports'}/" in message and "could not be written: No space left on device" in message
    assert "Traceback" not in message and exported(tmp_path / "exports") == earlier  # no staging folder left
    flags[flags.index("--output_dir") + 1] = str(tmp_path / "new")
    assert export.main(flags) == 1 and exported(tmp_path / "new") == {}  # a folder it made stays empty


@pytest.mark.slow
def test_an_export_past_a_file_size_limit(task, checkpoint, tmp_path):
    """`ulimit -f` below the model's size, then the export command: torch's zip writer, after a failed write to a
    file, aborted the process."""
    flags = ["--ckpt_path", checkpoint, "--output_dir", str(tmp_path / "exports")]
    assert export.main(flags) == 0
    earlier = exported(tmp_path / "exports")
    limit = (tmp_path / "exports" / "model.pt2").stat().st_size // 2
    assert limit > (tmp_path / "exports" / "preprocessing.json").stat().st_size
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    ended = subprocess.run(
        command("export", *flags),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard)),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=command_environment(),
    )
    message = one_line(ended.stderr)
    assert ended.returncode == 1 and message.startswith("Error: "), message
    assert "model.pt2 could not be written: File too large" in message
    assert exported(tmp_path / "exports") == earlier


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A real, small file system at ``folder`` (tmpfs: needs root, as in CI's container; skipped elsewhere)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)
        os.sync()


@pytest.mark.slow
def test_a_run_on_a_disk_that_fills_up(task, tmp_path, capsys):
    """A disk with room for the run's first epoch (its record, logs, best and last checkpoints), not for its second's
    checkpoints beside them (each is written whole beside the one it replaces)."""
    big = [*QUICK, "--net.hidden", "2000", "--max_epochs", "6"]  # checkpoints of 150 kB: the logs are small beside
    assert main([*big, "--max_epochs", "1", "--output_dir", str(tmp_path / "sized")]) == 0
    size = (tmp_path / "sized" / "checkpoints" / "last.ckpt").stat().st_size
    with small_disk(tmp_path / "small", f"{(5 * size) // 2 // 1024}k") as disk:
        run = disk / f"run-{uuid.uuid4().hex[:6]}"
        assert main([*big, "--output_dir", str(run)]) == 1
        message = one_line(capsys.readouterr().err)
        assert "could not be written: No space left on device" in message and "Traceback" not in message, message
        last = run / "checkpoints" / "last.ckpt"
        epochs_kept = torch.load(last, weights_only=True)["epoch"] + 1
        moved = tmp_path / "roomy"
        shutil.copytree(run, moved)  # room again: the run folder moved to a disk with space, and resumed there
        command = resume_command(message)
        command[command.index("--output_dir") + 1] = str(moved)
        assert main(command) == 0 and epochs_kept >= 1


@pytest.mark.slow
def test_an_export_onto_a_disk_that_is_full(task, checkpoint, tmp_path, capsys):
    """The new export does not fit beside the earlier one."""
    flags = ["--ckpt_path", checkpoint, "--formats", "pt2", "onnx"]
    assert export.main([*flags, "--output_dir", str(tmp_path / "sized")]) == 0
    size = sum(path.stat().st_size for path in (tmp_path / "sized").iterdir())
    with small_disk(tmp_path / "small", f"{(3 * size) // 2 // 1024 + 8}k") as disk:
        flags += ["--output_dir", str(disk / "exports")]
        assert export.main(flags) == 0
        earlier = exported(disk / "exports")
        assert export.main(flags) == 1
        message = one_line(capsys.readouterr().err)
        assert "could not be written: No space left on device" in message and "Traceback" not in message, message
        assert exported(disk / "exports") == earlier
