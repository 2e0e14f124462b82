"""What PyTorch can run on here, and why a GPU that was asked for cannot be used."""

import os

import torch

from .errors import UserError

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


def check_accelerator(accelerator: str) -> None:
    """Refuse a GPU run up front, with the reason, when no GPU is usable."""
    if str(accelerator).lower() not in GPU_ACCELERATORS or torch.cuda.is_available():
        return
    if accelerator == "gpu" and torch.backends.mps.is_available():
        return  # Lightning's "gpu" also means Apple's MPS
    raise UserError(
        f"--accelerator {accelerator} asks for a GPU, but none can be used: {why_no_cuda()}. "
        "Train on the CPU with --accelerator cpu, or use --accelerator auto to take a GPU whenever one is usable."
    )
