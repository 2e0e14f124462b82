#!/usr/bin/env python
"""What PyTorch can run on here, what Lightning will pick, and why a GPU is not used: `python scripts/devices.py`."""

import argparse
import logging
import os
import sys

import torch
from lightning.pytorch import Trainer

from mnist_lightning.core.devices import why_no_cuda
from mnist_lightning.core.errors import run_main


def lightning_choice() -> str:
    """What ``--accelerator auto --devices auto`` resolves to, asked of Lightning itself."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no "GPU available: ..." banner
    trainer = Trainer(accelerator="auto", devices="auto", logger=False, enable_checkpointing=False)
    accelerator = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    return f"{accelerator} x {trainer.num_devices} ({type(trainer.strategy).__name__})"


def report() -> str:
    """The checks people scatter through their scripts (torch build, device count, names...) as one report."""
    cuda = torch.cuda.is_available()
    lines = [
        f"PyTorch {torch.__version__}: "
        + (f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"),
        f"cuDNN: {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'not available'}",
        "CUDA_VISIBLE_DEVICES: "
        + (repr(os.environ["CUDA_VISIBLE_DEVICES"]) if "CUDA_VISIBLE_DEVICES" in os.environ else "not set"),
        f"torch.cuda.is_available(): {cuda}",
        f"torch.cuda.device_count(): {torch.cuda.device_count() if cuda else 0}",
    ]
    for index in range(torch.cuda.device_count() if cuda else 0):
        props = torch.cuda.get_device_properties(index)
        lines.append(
            f"  cuda:{index}: {props.name}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 2**30:.1f} GiB"
        )
    lines += [
        f"MPS (Apple GPU) available: {torch.backends.mps.is_available()}",
        f"CPU threads: {torch.get_num_threads()}",
        f"--accelerator auto --devices auto picks: {lightning_choice()}",
    ]
    if not cuda:
        if torch.version.cuda is None:
            fix = "Install a CUDA build of PyTorch (see pytorch.org) on a machine with an NVIDIA GPU."
        elif "CUDA_VISIBLE_DEVICES" in why_no_cuda():
            fix = "Unset CUDA_VISIBLE_DEVICES or list a GPU index in it."
        else:
            fix = "Check `nvidia-smi`: it must list the GPU, with a driver that supports this CUDA version."
        lines.append(f"No CUDA GPU is used because {why_no_cuda()}. {fix}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="devices.py", description=__doc__).parse_args(argv)
    return run_main(lambda: print(report()), exiting=True)


if __name__ == "__main__":
    sys.exit(main())
