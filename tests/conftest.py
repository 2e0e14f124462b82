"""Fixtures: the tests' own task (the machinery's tests run on it), a small MNIST look-alike in torchvision's layout
and real MNIST when available (for the example's tests); GPU tests skip."""

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import write_fake_mnist

from mnist_lightning.core import classes
from mnist_lightning.core.cli import build_parser

TASK = {"TEST_MODEL": "tasks.Classify", "TEST_DATA_MODULE": "own_data.Points"}  # see tests/command.py


def pytest_configure(config):
    """Started as a shell's background job (`nohup make test &`), the tests would inherit Ctrl-C ignored; they send
    it as a terminal does, to this process and to the commands they start (which get the default back at exec)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def signal_handlers():
    """A script run in this process (runpy) ignores Ctrl-C, SIGTERM and SIGUSR1 once done (run_main's ``exiting``),
    as its process is about to exit; the tests after it, and the processes they start, get the handlers back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """torch on one thread for each test: the tests' networks are tiny, and on a busy machine (2 cores shared with
    other work) torch's threads waiting for each other made each run of them three times as slow."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def task(monkeypatch):
    """core/ given the tests' own LightningModule and default data module (classes.MODEL and DATA_MODULE), as a
    project names its own: ``tasks.Classify`` on ``own_data.Points``, unless the test calls ``task(model, data)``.
    A command started as a process gets them through tests/command.py, from the environment."""

    def use(model: str = TASK["TEST_MODEL"], data: str = TASK["TEST_DATA_MODULE"]) -> None:
        monkeypatch.setattr(classes, "MODEL", model)
        monkeypatch.setattr(classes, "DATA_MODULE", data)
        monkeypatch.setenv("TEST_MODEL", model)
        monkeypatch.setenv("TEST_DATA_MODULE", data)
        build_parser.cache_clear()  # built for the classes named

    use()
    yield use
    build_parser.cache_clear()


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
