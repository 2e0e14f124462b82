"""devices.py: what PyTorch and Lightning see here, and why a GPU is not used."""

import runpy
import sys
from pathlib import Path

import pytest
import torch
from helpers import one_line

from mnist_lightning.core import devices

ROOT = Path(__file__).resolve().parents[1]


def run_devices(monkeypatch, capsys, *flags: str) -> str:
    """`python scripts/devices.py FLAGS`, in this process; its output on one line."""
    monkeypatch.setattr(sys, "argv", ["devices.py", *flags])
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # as `python scripts/x.py` does
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts" / "devices.py"), run_name="__main__")
    assert exit_info.value.code == 0
    return one_line(capsys.readouterr().out)


def test_devices_report_says_what_is_used_and_why(monkeypatch, capsys):
    out = run_devices(monkeypatch, capsys)
    assert f"PyTorch {torch.__version__}" in out and "--accelerator auto --devices auto picks:" in out
    if not torch.cuda.is_available():
        assert "No CUDA GPU is used because" in out


def test_why_no_cuda_names_the_cause(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    if torch.version.cuda:
        assert "CUDA_VISIBLE_DEVICES" in devices.why_no_cuda()
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in devices.why_no_cuda()


def test_devices_help_is_help_not_the_report(monkeypatch, capsys):
    out = run_devices(monkeypatch, capsys, "--help")
    assert out.startswith("usage: devices.py") and "torch.cuda.is_available()" not in out
