"""Why no GPU is usable: what Lightning leaves unsaid when --accelerator gpu cannot work."""

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


def check_gpu(accelerator: object) -> None:
    """Lightning says only "No supported gpu backend found!": the reason is what a user needs."""
    accelerator = str(accelerator).lower()
    usable = torch.cuda.is_available() or (accelerator == "gpu" and torch.backends.mps.is_available())
    if accelerator in ("gpu", "cuda") and not usable:
        raise UserError(
            f"--accelerator {accelerator} asks for a GPU, but none can be used: {why_no_cuda()}. "
            "Run on the CPU with --accelerator cpu, or use --accelerator auto to take a GPU whenever one is usable."
        )
