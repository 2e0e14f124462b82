"""MNIST with PyTorch Lightning: a SimpleNN, its LightningModule and a LightningDataModule."""

__version__ = "0.1.0"
