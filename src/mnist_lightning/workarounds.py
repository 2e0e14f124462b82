"""Workarounds for the library versions this template supports, each with the reason it is here and when it can
go: applied by :func:`mnist_lightning.errors.run_main`, which every entry point goes through, around fit and test
(:func:`lightning_notes_ignored`), and at the end of a run that ended well (:func:`end_process_group`)."""

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# Log lines dropped by their start, so each can stay once its library stops it:
# - Lightning 2.6 advertises its cloud services ("💡 Tip: ... try installing litlogger") in every run;
# - it suggests torch.set_float32_matmul_precision on GPU runs, which --float32_matmul_precision sets and records;
# - torch (2.14, 2.15) logs "No CUDA runtime is found" as --compile loads its C++ helpers on a machine with a CUDA
#   toolkit and no usable GPU: harmless for a CPU run, and read as an error.
NOISE = ("💡 Tip:", "You are using a CUDA device", "No CUDA runtime is found")
CPP_EXTENSION = "torch.utils.cpp_extension"  # a logger's filters see its own records, not its children's


def not_noise(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(NOISE)


def apply_workarounds() -> None:
    # Lightning 2.6 calls a torch API that torch >= 2.13 deprecates; gone once it updates its utilities/_pytree.py.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero", CPP_EXTENSION):
        logging.getLogger(name).addFilter(not_noise)  # once: addFilter skips a filter that is already there


@contextmanager
def lightning_notes_ignored() -> Iterator[None]:
    """Around fit and test: Lightning's warnings about what this template does on purpose."""
    with warnings.catch_warnings():
        # A resumed run's checkpoints/ holds its earlier checkpoints; Classifier logs per epoch, not per step; the
        # model summary cannot size bf16; a run stopped by --max_time is resumed without it (see cli.py).
        warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        warnings.filterwarnings("ignore", message=r"The number of training batches .* logging interval")
        warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
        warnings.filterwarnings("ignore", message=r"Be aware that when using `ckpt_path`.*callbacks: \['EpochTimer'\]")
        yield


def end_process_group() -> None:
    """After a distributed run that ended well, destroy its process group, as PyTorch's docs advise: Lightning 2.6
    does it for NCCL only, and a gloo group (DDP on CPUs) left to the interpreter's exit can abort it (SIGABRT)
    while torchrun waits. Not after an error, when the others may be in a collective."""
    import torch.distributed as dist  # here: this module is imported before torch

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
