"""Workarounds for the library versions this template supports, each with why it is here and when it can go;
applied by :func:`mnist_lightning.core.errors.run_main`, which every entry point goes through."""

import logging
import signal
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from lightning.pytorch.profilers import PassThroughProfiler

# The loggers not_noise filters: a logger's filters see its own records, not its children's.
NOISY = ["lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero", "torch.utils.cpp_extension"]
NOISY += ["lightning.pytorch.trainer.connectors.checkpoint_connector"]


def not_noise(record: logging.LogRecord) -> bool:
    """Log lines dropped by their start (each can go once its library drops it): Lightning 2.6's advertisement ("💡
    Tip: ... litlogger") in every run, and its advice to set what --float32_matmul_precision sets and records; torch
    2.14's and 2.15's "No CUDA runtime is found" as --compile loads its C++ helpers with a CUDA toolkit and no GPU;
    Lightning's "`weights_only` was not set" as it saves a whole checkpoint for SLURM's requeue (a save, not a load)."""
    noise = ("💡 Tip:", "You are using a CUDA device", "No CUDA runtime is found", "`weights_only` was not set")
    return not record.getMessage().startswith(noise)


def apply_workarounds() -> None:
    # Lightning 2.6 calls a torch API that torch >= 2.13 deprecates; gone once it updates its utilities/_pytree.py.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    for name in NOISY:
        logging.getLogger(name).addFilter(not_noise)  # once: addFilter skips a filter that is already there
    from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector

    _SignalConnector._sigterm_notifier_fn = note_sigterm


def note_sigterm(connector, signum, frame):
    """Lightning 2.6's SIGTERM handler, under DDP, broadcasts from within the handler (its PR #20825; run again by a
    second SIGTERM, or by the signal Lightning passes on to the other processes, it waits forever for a broadcast no
    other process makes), and each process then stops after its own batch, leaving the others waiting for it in their
    next collective (Lightning issue #20806). Here it only notes the signal, for one process; under DDP it leaves it
    to the handler it calls next, callbacks.StopTogether's: every process stops after the same batch. Can go once
    Lightning does that. Its predict loop never looks: a prediction stops at once, as a command ended by SIGTERM."""
    if connector.trainer.predicting:
        sys.exit(128 + signal.SIGTERM)
    if connector.trainer.world_size == 1:
        connector.received_sigterm = True  # what Lightning's loops stop on, after their batch


class NoProfiler(PassThroughProfiler):
    """Lightning's default profiler, which records nothing, at less cost: Lightning enters its context around every
    hook of every callback (six hooks of each at every training step), and Lightning's is a context manager made anew
    by a generator each time; this one hands back one that exists. Can go once Lightning's default skips the
    context."""

    def profile(self, action_name: str) -> nullcontext:
        return NOTHING


NOTHING = nullcontext()


def predict_batches_as_made(datamodule) -> None:
    """Lightning re-creates a data module's predict DataLoader to count its batches' indices, and fails on one given
    its batch size by position, ``DataLoader(dataset, 32)`` (Lightning issue 17991, open). predict.py counts no indices:
    Lightning is given the loader's batches as an iterable of its own, which it takes as it is. Can go once fixed."""
    make = datamodule.predict_dataloader
    datamodule.predict_dataloader = lambda: Batches(make())


class Batches:
    def __init__(self, loader) -> None:
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


@contextmanager
def lightning_notes_ignored() -> Iterator[None]:
    """Around building the Trainer, fit and test: Lightning's warnings about what this template does on purpose."""
    with warnings.catch_warnings():
        # On purpose: bf16 models, a resume without --max_time.
        warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
        warnings.filterwarnings("ignore", message=r"Be aware that when using `ckpt_path`.*callbacks: \['Timer'\]")
        # An empty DataLoader: the run says which one, and what to do (checks.no_batch).
        warnings.filterwarnings(
            "ignore",
            message=r"Total length of `\w+` across ranks is zero\.|"
            # A resumed run's own checkpoints; per-epoch logs.
            r"Checkpoint directory .* exists and is not empty|"
            r"The number of training batches .* logging interval|"
            # Lightning's old names of 16-mixed and bf16-mixed: the run's summary names the precision used.
            r"`precision=(16|bf16)` is supported for historical reasons|"
            # A data module without val_dataloader: the run tests its last weights, as the README says.
            r"You defined a `validation_step` but have no `val_dataloader`|"
            # predict.py counts its rows itself (predict_batches_as_made).
            r"Couldn't infer the batch indices fetched from your dataloader",
        )
        yield


def end_process_group() -> None:
    """Destroy the process group of a distributed run that ended well, or that SIGTERM stopped (every process after
    the same batch: callbacks.StopTogether), as PyTorch advises (after an error, the others may be in a collective):
    Lightning 2.6 does it for NCCL only; a gloo group left to exit can SIGABRT ("terminate called without an active
    exception")."""
    import torch.distributed as dist  # here: this module is imported before torch

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
