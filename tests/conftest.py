"""Fixtures: a small MNIST look-alike in torchvision's layout, real MNIST when available; GPU tests skip."""

import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import write_fake_mnist


@pytest.fixture(scope="session")
def fake_mnist(tmp_path_factory) -> Path:
    return write_fake_mnist(tmp_path_factory.mktemp("fake_mnist"))


@pytest.fixture(scope="session")
def real_mnist(tmp_path_factory) -> Path:
    """A private copy of the real MNIST files from $MNIST_DATA_DIR/MNIST/raw (the source stays untouched)."""
    source = os.environ.get("MNIST_DATA_DIR")
    if not source or not (Path(source) / "MNIST" / "raw").is_dir():
        pytest.skip("real MNIST not available: set MNIST_DATA_DIR to a folder holding MNIST/raw/")
    root = tmp_path_factory.mktemp("real_mnist")
    shutil.copytree(Path(source) / "MNIST" / "raw", root / "MNIST" / "raw")
    return root


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
