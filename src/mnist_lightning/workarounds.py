"""Workarounds for the library versions this template supports, each with the reason it is here and when it can
go. Applied once, by :func:`mnist_lightning.errors.run_main`, which every entry point goes through."""

import warnings


def apply_workarounds() -> None:
    # Lightning 2.6 calls a torch API that torch >= 2.13 deprecates, and warns at every run; not the user's
    # concern, and gone once Lightning updates lightning/pytorch/utilities/_pytree.py.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
