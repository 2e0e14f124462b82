"""Workarounds for the library versions this template supports, each with the reason it is here and when it can
go. Applied once, by :func:`mnist_lightning.errors.run_main`, which every entry point goes through, and around
fit and test (:func:`lightning_notes_ignored`)."""

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


class _NoAdvertisement(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("💡 Tip:")


_NO_ADVERTISEMENT = _NoAdvertisement()  # one instance: addFilter ignores it when it is already there


def apply_workarounds() -> None:
    # Lightning 2.6 calls a torch API that torch >= 2.13 deprecates, and warns at every run; not the user's
    # concern, and gone once Lightning updates lightning/pytorch/utilities/_pytree.py.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # Lightning 2.6 advertises its cloud services ("💡 Tip: ... try installing litlogger") at INFO level in every
    # run, among the lines that describe the run; dropped by its prefix, so it can stay when Lightning stops it.
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NO_ADVERTISEMENT)


@contextmanager
def lightning_notes_ignored() -> Iterator[None]:
    """Around fit and test: Lightning's warnings about what this template does on purpose."""
    with warnings.catch_warnings():
        # A resumed run's checkpoints/ holds its own earlier checkpoints by design.
        warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        # About step-level logs, of which MNISTClassifier has none (its metrics are per epoch; the learning rate is
        # logged every log_every_n_steps), and about the summary's size estimate under bf16: not the user's concern.
        warnings.filterwarnings("ignore", message=r"The number of training batches .* logging interval")
        warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")
        # A run stopped by --max_time, resumed without it: its time limit is not part of its record (see cli.py).
        warnings.filterwarnings("ignore", message=r"Be aware that when using `ckpt_path`.*callbacks: \['EpochTimer'\]")
        yield
