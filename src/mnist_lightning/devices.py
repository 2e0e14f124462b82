"""What PyTorch can run on here, what Lightning will pick, and why a GPU is not used."""

import argparse
import logging
import os
import sys

import torch

from .errors import UserError, run_main

GPU_ACCELERATORS = ("gpu", "cuda")


def why_no_cuda() -> str:
    """One sentence on why ``torch.cuda.is_available()`` is False."""
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build, without CUDA support"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process"
    return (
        f"this PyTorch ({torch.__version__}) was built for CUDA {torch.version.cuda}, but it found no usable "
        "NVIDIA GPU: no GPU is installed, or its driver is missing or too old"
    )


def check_accelerator(accelerator: str, devices: object = 1) -> None:
    """Refuse a GPU run up front, with the reason, when no GPU (or not enough of them) is usable."""
    on_cpu = str(accelerator).lower() == "cpu" or (
        str(accelerator).lower() == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()
    )
    if on_cpu and str(devices).isdigit() and int(devices) > (os.cpu_count() or 1):
        raise UserError(
            f"--devices {devices} on the CPU starts {devices} training processes, but this machine has "
            f"{os.cpu_count()} cores. Use --devices {os.cpu_count()} or fewer."
        )
    if str(accelerator).lower() not in GPU_ACCELERATORS:
        return
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        wanted = int(devices) if str(devices).isdigit() else None
        if wanted is not None and wanted > count:
            raise UserError(
                f"--devices {wanted} asks for {wanted} GPUs, but this machine has {count}. "
                f"Use --devices {count} (or -1 for all), or a list of GPU indices such as [0]."
            )
        return
    if accelerator == "gpu" and torch.backends.mps.is_available():
        return  # Lightning's "gpu" also means Apple's MPS
    raise UserError(
        f"--accelerator {accelerator} asks for a GPU, but none can be used: {why_no_cuda()}. "
        "Run on the CPU with --accelerator cpu, or use --accelerator auto to take a GPU whenever one is usable."
    )


def device_flags_hint(message: str) -> str:
    """What to pass instead, when Lightning's message (Trainer or Fabric) is about --accelerator or --devices; its
    own lists leave out "gpu" and say nothing of this machine. Empty for other messages."""
    if "accelerator name" in message:
        return "--accelerator takes cpu, gpu (any GPU PyTorch can use), cuda, mps, tpu or auto."
    if "devices" in message:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return (
            "--devices takes a count like 1, a list of GPU indices like [0, 1], -1 for all, or auto; this machine "
            f"has {gpus} usable GPU(s) and {os.cpu_count()} CPU cores."
        )
    return ""


def missing_package(error: ImportError) -> str:
    """The message for settings whose package is not installed (``--accelerator tpu`` without torch_xla): Lightning
    raises an ImportError, with the package and how to install it, when it builds the accelerator."""
    text = " ".join(str(error).split()).rstrip(".") or f"No module named {error.name!r}"
    return (
        f"These settings need a package that is not installed: {text}. Install it, or choose another --accelerator "
        "(cpu, gpu, mps or auto), --strategy or --precision."
    )


def lightning_choice() -> str:
    """What ``--accelerator auto --devices auto`` resolves to, asked of Lightning itself."""
    from lightning.pytorch import Trainer

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no "GPU available: ..." banner
    trainer = Trainer(accelerator="auto", devices="auto", logger=False, enable_checkpointing=False)
    accelerator = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    return f"{accelerator} x {trainer.num_devices} ({type(trainer.strategy).__name__})"


def report() -> str:
    """The checks people scatter through their scripts (torch build, device count, names...) as one report."""
    lines = [
        f"PyTorch {torch.__version__}: "
        + (f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"),
        f"cuDNN: {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'not available'}",
        "CUDA_VISIBLE_DEVICES: "
        + (repr(os.environ["CUDA_VISIBLE_DEVICES"]) if "CUDA_VISIBLE_DEVICES" in os.environ else "not set"),
        f"torch.cuda.is_available(): {torch.cuda.is_available()}",
        f"torch.cuda.device_count(): {torch.cuda.device_count() if torch.cuda.is_available() else 0}",
    ]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
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
    if not torch.cuda.is_available():
        lines.append(
            f"No CUDA GPU is used because {why_no_cuda()}. "
            + (
                "Install a CUDA build of PyTorch (see pytorch.org) on a machine with an NVIDIA GPU."
                if torch.version.cuda is None
                else "Unset CUDA_VISIBLE_DEVICES or list a GPU index in it."
                if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1")
                else "Check `nvidia-smi`: it must list the GPU, with a driver that supports this CUDA version."
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="devices.py", description=__doc__).parse_args(argv)
    return run_main(lambda: print(report()))


if __name__ == "__main__":
    sys.exit(main())
