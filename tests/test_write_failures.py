"""A write that fails (a full disk) ends in one message naming the file and the cause; the last good last.ckpt is
kept, and the resume command printed works once there is room."""

import os
import shutil
import subprocess
import uuid

import pytest
import torch
from helpers import TINY_RUN, one_line

from mnist_lightning.core.train import main


def resume_command(message: str) -> list[str]:
    return message.split("Resume with: ")[1].split()[2:]  # after "python scripts/train.py"


def test_a_full_disk_while_saving_a_checkpoint(fake_mnist, tmp_path, capsys, monkeypatch):
    """What torch raises when the disk fills during torch.save, from the third checkpoint on."""
    saves = []
    real_save = torch.save

    def save(obj, file, *args, **kwargs):
        saves.append(file)
        if len(saves) >= 3:
            file.write(b"half a checkpoint")
            raise RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos 5632 vs 5520")
        return real_save(obj, file, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    run = tmp_path / "run"
    flags = ["--data.data_dir", str(fake_mnist), *TINY_RUN, "--max_epochs", "3", "--quiet", "true"]
    assert main([*flags, "--output_dir", str(run)]) == 1
    message = one_line(capsys.readouterr().err)
    assert message.startswith("Error: ") and "could not be written: the disk is full" in message, message
    assert "last.ckpt holds the epochs finished before" in message and "Traceback" not in message
    assert not list(run.glob("checkpoints/.*partial"))
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    assert main(resume_command(message)) == 0


@pytest.mark.slow
def test_a_run_on_a_disk_that_fills_up(fake_mnist, tmp_path, capsys):
    """On a real, small file system (tmpfs: needs root, as in CI's container; skipped elsewhere)."""
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=280k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        run = disk / f"run-{uuid.uuid4().hex[:6]}"
        flags = ["--data.data_dir", str(fake_mnist), *TINY_RUN, "--max_epochs", "6", "--quiet", "true"]
        assert main([*flags, "--output_dir", str(run)]) == 1
        message = one_line(capsys.readouterr().err)
        assert "could not be written: the disk is full" in message and "Traceback" not in message, message
        last = run / "checkpoints" / "last.ckpt"
        epochs_kept = torch.load(last, weights_only=True)["epoch"] + 1
        moved = tmp_path / "roomy"
        shutil.copytree(run, moved)  # room again: the run folder moved to a disk with space, and resumed there
        command = resume_command(message)
        command[command.index("--output_dir") + 1] = str(moved)
        assert main(command) == 0 and epochs_kept >= 1
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        os.sync()
