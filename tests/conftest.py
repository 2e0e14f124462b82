"""Shared fixtures: a small MNIST look-alike in torchvision's layout, real MNIST when available, GPU skips."""

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

FAKE_TRAIN, FAKE_TEST, FAKE_VAL = 1_200, 300, 200
# Flags that make a full run finish in seconds on the fake data.
TINY_RUN = ["--val_size", str(FAKE_VAL), "--batch_size", "100", "--max_epochs", "2", "--enable_progress_bar", "false"]


def one_line(text: str) -> str:
    """A wrapped message as one line, for matching phrases that may straddle a line break."""
    return " ".join(text.split())


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in the IDX format of the original MNIST files (what torchvision parses)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def fake_digits(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy 28x28 images where each class lights its own 6x6 patch: learnable, unlike pure noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count)
    images = rng.integers(0, 60, (count, 28, 28))
    for i, label in enumerate(labels):
        row, col = 2 + 8 * (label // 4), 2 + 8 * (label % 4)
        images[i, row : row + 6, col : col + 6] += 180
    return images.astype(np.uint8), labels.astype(np.uint8)


def write_fake_mnist(root: Path) -> Path:
    """Uncompressed IDX files in <root>/MNIST/raw/, as torchvision leaves them after extraction."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, count, seed in (("train", FAKE_TRAIN, 0), ("t10k", FAKE_TEST, 1)):
        images, labels = fake_digits(count, seed)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root


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
