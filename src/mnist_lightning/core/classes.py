"""The classes the machinery builds, by class path, as ``LightningCLI(model_class, datamodule_class)`` receives them:
your LightningModule (its arguments are train.py's top-level flags) and the default data module (--data replaces it).
The files you edit import nothing from core/; this is the one place core/ names them."""

import importlib

from lightning.pytorch import LightningModule

MODEL = "mnist_lightning.lightning_module.Classifier"
DATA_MODULE = "mnist_lightning.datamodule.MNISTDataModule"


def model_class() -> type[LightningModule]:
    module, _, name = MODEL.rpartition(".")
    return getattr(importlib.import_module(module), name)
