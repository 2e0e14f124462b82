"""Why no GPU is usable: what Lightning leaves unsaid when --accelerator gpu cannot work."""

import os

import torch

from .errors import UserError


def why_no_cuda() -> str:
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1")
    return "CUDA_VISIBLE_DEVICES hides every GPU" if hidden else "no NVIDIA GPU is found, or its driver is too old"


def check_gpu(accelerator: object) -> None:
    """Lightning says only "No supported gpu backend found!": the reason is what a user needs. (It refuses "GPU".)"""
    usable = torch.cuda.is_available() or (accelerator == "gpu" and torch.backends.mps.is_available())
    if accelerator in ("gpu", "cuda") and not usable:
        why = f"asks for a GPU, but none can be used: {why_no_cuda()}"
        raise UserError(f"--accelerator {accelerator} {why}. Use --accelerator cpu.")
