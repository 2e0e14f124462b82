"""Workarounds for the library versions this template supports, each with the reason it is here and when it can
go. Applied once, by :func:`mnist_lightning.errors.run_main`, which every entry point goes through."""

import logging
import warnings


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
