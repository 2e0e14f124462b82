"""Device settings that cannot work here, refused before any work with the reason and what to pass instead."""

import os

import torch

from .errors import UserError


def why_no_cuda() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build, without CUDA support"
    if visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process"
    return (
        f"this PyTorch ({torch.__version__}) was built for CUDA {torch.version.cuda}, but it found no usable "
        "NVIDIA GPU: no GPU is installed, or its driver is missing or too old"
    )


def check_accelerator(accelerator: str, devices: object = 1) -> None:
    """Lightning would refuse these later without the reason, or (more CPU processes than cores) crawl."""
    accelerator, wanted, cores = str(accelerator).lower(), int(devices) if str(devices).isdigit() else 0, os.cpu_count()
    cuda, mps, gpus = torch.cuda.is_available(), torch.backends.mps.is_available(), torch.cuda.device_count()
    if (accelerator == "cpu" or (accelerator == "auto" and not cuda and not mps)) and wanted > (cores or 1):
        raise UserError(
            f"--devices {wanted} on the CPU starts {wanted} processes, but this machine has {cores} cores. "
            f"Use --devices {cores} or fewer."
        )
    if accelerator in ("gpu", "cuda") and cuda and wanted > gpus:
        raise UserError(
            f"--devices {wanted} asks for {wanted} GPUs, but this machine has {gpus}. "
            f"Use --devices {gpus} (or -1 for all), or a list of GPU indices such as [0]."
        )
    if not cuda and (accelerator == "cuda" or (accelerator == "gpu" and not mps)):  # Lightning's gpu is also MPS
        raise UserError(
            f"--accelerator {accelerator} asks for a GPU, but none can be used: {why_no_cuda()}. "
            "Run on the CPU with --accelerator cpu, or use --accelerator auto to take a GPU whenever one is usable."
        )


def device_flags_hint(message: str, accelerator: object = "auto") -> str:
    """For Lightning's messages about --accelerator or --devices: its lists leave out gpu and this machine's."""
    if "accelerator name" in message:
        return "--accelerator takes cpu, gpu (any GPU PyTorch can use), cuda, mps, tpu or auto."
    name = str(accelerator).lower()
    gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    if "devices" in message and (name == "cpu" or (name == "auto" and not gpu)):  # -1 (all) is for GPUs only
        return (
            f"On the CPU, --devices takes a number of processes, 1 to {os.cpu_count()} (this machine's cores), or auto."
        )
    if "devices" in message:
        return (
            "--devices takes a count like 1, a list of GPU indices like [0, 1], -1 for all, or auto; this machine "
            f"has {torch.cuda.device_count()} usable GPU(s) and {os.cpu_count()} CPU cores."
        )
    return ""


def missing_package(error: ImportError) -> str:
    """Lightning's ImportError for settings whose package is missing (--accelerator tpu without torch_xla)."""
    return (
        f"These settings need a package that is not installed: {str(error).strip().rstrip('.')}. Install it, or "
        "choose another --accelerator (cpu, gpu, mps or auto), --strategy or --precision."
    )
