"""Test helpers: short runs of the tests' own task (in this process, or as a command started as a user starts it),
small MNIST-format IDX files in torchvision's folder layout for the example's tests, and networks of a user's own.

Imported by the tests as ``from helpers import ...`` (pytest puts tests/ on sys.path); the fixtures that use
them are in conftest.py.
"""

import hashlib
import math
import os
import struct
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
FAKE_TRAIN, FAKE_TEST, FAKE_VAL = 1_200, 300, 200
# Flags that make a full run finish in seconds on the fake MNIST data (the example's tests).
TINY_RUN = ["--data.val_size", str(FAKE_VAL), "--batch_size", "100", "--max_epochs", "2"]
TINY_RUN += ["--enable_progress_bar", "false"]
# The same for the tests' own task (conftest.py's ``task``): own_data.Points' 360 training points in 12 batches an
# epoch, 120 validation and 120 test points in 4 batches each.
QUICK = ["--batch_size", "32", "--max_epochs", "2", "--enable_progress_bar", "false"]
STEPS_PER_EPOCH = 12  # of QUICK's batch size on own_data.Points


@contextmanager
def own_task(model: str = "tasks.Classify", data: str = "own_data.Points") -> Iterator[None]:
    """conftest.py's ``task`` for a fixture of a wider scope (a module's trained run): core/classes.py names the
    tests' own LightningModule and data module, and the commands started as processes get them (tests/command.py)."""
    from mnist_lightning.core import classes
    from mnist_lightning.core.cli import build_parser

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(classes, "MODEL", model)
        patch.setattr(classes, "DATA_MODULE", data)
        patch.setenv("TEST_MODEL", model)
        patch.setenv("TEST_DATA_MODULE", data)
        build_parser.cache_clear()  # built for the classes named
        try:
            yield
        finally:
            build_parser.cache_clear()


def command(name: str, *args: str | os.PathLike | bytes) -> list:
    """A command of the project as a user starts it, ``python tests/command.py train|evaluate|predict|export ARGS``:
    core/ with the task that TEST_MODEL and TEST_DATA_MODULE name (the ``task`` fixture sets them)."""
    return [sys.executable, str(ROOT / "tests" / "command.py"), name, *args]


def command_environment() -> dict[str, str]:
    """The environment of :func:`command`: tests/ (the task's modules) and src/ importable."""
    path = os.pathsep.join(filter(None, [str(ROOT / "tests"), str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


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


def write_fake_dataset(root: Path, folder: str = "MNIST", declare_sums: bool = True) -> Path:
    """Uncompressed IDX files in ``<root>/<folder>/raw/``, as torchvision leaves them after extraction, with their
    MD5 sums in ``MD5SUMS`` unless ``declare_sums`` is False (the way data of one's own in MNIST's format declares
    them; see data.SUMS_FILE). ``folder`` is torchvision's class name: MNIST, FashionMNIST or KMNIST."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for prefix, count, seed in (("train", FAKE_TRAIN, 0), ("t10k", FAKE_TEST, 1)):
        images, labels = fake_digits(count, seed)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    if not declare_sums:
        return root
    sums = (f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.name}" for path in sorted(raw.glob("*-ubyte")))
    (raw / "MD5SUMS").write_text("\n".join(sums) + "\n")
    return root


def write_fake_mnist(root: Path, declare_sums: bool = True) -> Path:
    return write_fake_dataset(root, "MNIST", declare_sums)


class SmallCNN(nn.Module):
    """A user's own network, outside the package: what ``--net helpers.SmallCNN`` swaps in for SimpleNN. Like
    every network of the template it takes the shape of one sample and the number of classes first."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, channels: int = 8) -> None:
        super().__init__()
        in_channels, height, width = input_shape
        self.features = nn.Sequential(nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
        self.classifier = nn.Linear(channels * (height // 4) * (width // 4), num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(self.features(images).flatten(1))


class NoWeights(nn.Module):
    """A network with nothing to train: its scores are the first pixels of each sample."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes

    def forward(self, samples: Tensor) -> Tensor:
        return samples.flatten(1)[:, : self.num_classes]


def linear_net(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A network given as a function that builds it: ``--net helpers.linear_net``."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


class CautiousNN(nn.Module):
    """A network that warns as it is built and works: its warning must reach the user."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        warnings.warn("CautiousNN: a note from the network's author", UserWarning, stacklevel=2)
        self.linear = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.linear(images.flatten(1))


def train_run(*flags: str) -> dict:
    """scripts/train.py in this process, without its error boundary: the run opened, built, fitted and tested; its
    metrics (an error is raised, as it was)."""
    from mnist_lightning.core.train import run

    return run(list(flags))
