"""Workarounds for the library versions this template supports, each with the reason it is here and when it can
go. Applied once, by :func:`mnist_lightning.errors.run_main`, which every entry point goes through, around
fit and test (:func:`lightning_notes_ignored`), and at the end of a run that ended well (:func:`end_process_group`)."""

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


class _Dropped(logging.Filter):
    """Drops a library's log records that start with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


# One instance each: addFilter ignores a filter that is already there.
_NO_ADVERTISEMENT = _Dropped("💡 Tip:")
_NO_CUDA_HOME_NOTE = _Dropped("No CUDA runtime is found")
_NO_TENSOR_CORE_NOTE = _Dropped("You are using a CUDA device")


def apply_workarounds() -> None:
    # Lightning 2.6 calls a torch API that torch >= 2.13 deprecates, and warns at every run; not the user's
    # concern, and gone once Lightning updates lightning/pytorch/utilities/_pytree.py.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # Lightning 2.6 advertises its cloud services ("💡 Tip: ... try installing litlogger") at INFO level in every
    # run, among the lines that describe the run; dropped by its prefix, so it can stay when Lightning stops it.
    # Lightning 2.6 also suggests torch.set_float32_matmul_precision on every GPU run left at "highest"; here that
    # is --float32_matmul_precision, chosen for the run and recorded in config.yaml, so the suggestion is noise.
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NO_ADVERTISEMENT)
        logging.getLogger(name).addFilter(_NO_TENSOR_CORE_NOTE)
    # torch (2.14, 2.15), when --compile imports its C++ extension helpers on a machine with a CUDA toolkit (nvcc or
    # CUDA_HOME) and no usable GPU, logs "No CUDA runtime is found, using CUDA_HOME=..." at WARNING level: true,
    # harmless for a CPU run, and read as an error. A GPU run that finds no GPU is refused by devices.py first.
    logging.getLogger("torch.utils.cpp_extension").addFilter(_NO_CUDA_HOME_NOTE)


@contextmanager
def lightning_notes_ignored() -> Iterator[None]:
    """Around fit and test: Lightning's warnings about what this template does on purpose."""
    with warnings.catch_warnings():
        # A resumed run's checkpoints/ holds its own earlier checkpoints by design.
        warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        # About step-level logs, of which Classifier has none (its metrics are per epoch; the learning rate is
        # logged every log_every_n_steps), and about the summary's size estimate under bf16: not the user's concern.
        warnings.filterwarnings("ignore", message=r"The number of training batches .* logging interval")
        warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
        # A run stopped by --max_time, resumed without it: its time limit is not part of its record (see cli.py).
        warnings.filterwarnings("ignore", message=r"Be aware that when using `ckpt_path`.*callbacks: \['EpochTimer'\]")
        yield


def end_process_group() -> None:
    """After a distributed run that ended well, destroy its process group, as PyTorch's docs advise.

    Lightning 2.6 does this at exit for NCCL groups only. A gloo group (DDP on CPUs, the two-node run) left to the
    interpreter's shutdown can abort the process ("terminate called without an active exception", SIGABRT)
    while gloo's threads release their work, and torchrun then waits out its exit barrier. Not after an error:
    the other processes may still be in a collective. Can go when Lightning destroys groups of every backend.
    """
    import torch.distributed as dist  # here: this module is imported before torch, and every entry point loads it

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
