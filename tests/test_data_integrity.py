"""The MNIST example's data files are checked before they are used: archives by their MD5 sums (torchvision's, which
downloads a damaged one again), and the extracted files as the IDX files they are named after, images and labels of
one dataset. A wrong file is named in one paragraph (exit 1; after Lightning's banners, as Lightning calls
prepare_data) before any training, and no run folder is left."""

import gzip
import os
import shutil
from pathlib import Path

import example
import pytest
from helpers import TINY_RUN, one_line, write_fake_mnist
from lightning.fabric.utilities.exceptions import MisconfigurationException
from torchvision.datasets import MNIST

from mnist_lightning.core.train import main
from mnist_lightning.datamodule import MNISTDataModule

pytestmark = example.data


def fake_data_with_sums(root: Path) -> Path:  # (kept for the callers' names: the fake files need no sums now)
    return write_fake_mnist(root)


@pytest.fixture
def fake(tmp_path) -> Path:
    return write_fake_mnist(tmp_path / "data")


def train(data_dir, output_dir) -> int:
    return main(["--data.data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_RUN])


def refused(capsys, code, output_dir, *phrases):
    captured = capsys.readouterr()
    message = one_line(captured.err[captured.err.find("Error:") :])  # the last thing said, after the banners
    assert code == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert message.startswith("Error:") and captured.err.count("Error:") == 1
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    assert not output_dir.exists()


@example.task  # trains the project's LightningModule on MNIST
def test_fake_data_in_mnists_format_trains(fake, tmp_path):
    assert train(fake, tmp_path / "run") == 0


@example.task  # trains the project's LightningModule on MNIST
def test_images_and_labels_of_different_datasets_are_refused(fake, tmp_path, capsys):
    raw = fake / "MNIST" / "raw"
    shutil.copy(raw / "t10k-labels-idx1-ubyte", raw / "train-labels-idx1-ubyte")  # 300 labels for 1200 images
    refused(
        capsys, train(fake, tmp_path / "run"), tmp_path / "run", "not MNIST's", "[1200, 28, 28] images", "300 labels"
    )


@example.task  # trains the project's LightningModule on MNIST
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_file_that_is_not_an_idx_file_is_refused(fake, tmp_path, capsys, damage):
    labels = fake / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    labels.write_bytes(b"" if damage == "empty" else labels.read_bytes()[:100])
    refused(
        capsys,
        train(fake, tmp_path / "run"),
        tmp_path / "run",
        "are missing, damaged or not MNIST's",
        str(labels.parent),
    )


def test_damaged_archives_offline_are_named_and_left_as_they_are(tmp_path, monkeypatch):
    """torchvision extracts an archive only if its MD5 sum is the original's, and downloads a damaged one again."""
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # nothing listens there: offline
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, _ in MNIST.resources:
        (raw / name).write_bytes(gzip.compress(b"not MNIST"))
    with pytest.raises(MisconfigurationException, match=r"Error downloading train-images-idx3-ubyte\.gz"):
        MNISTDataModule(str(tmp_path)).prepare_data()
    assert sorted(path.name for path in raw.iterdir()) == sorted(name for name, _ in MNIST.resources)


def test_offline_without_the_files_says_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # nothing listens there: offline
    with pytest.raises(MisconfigurationException, match=r"Put the original train-images-idx3-ubyte\.gz") as error:
        MNISTDataModule(str(tmp_path / "empty")).prepare_data()
    assert "train-images-idx3-ubyte.gz" in str(error.value)


@pytest.fixture
def mnist_archives(tmp_path) -> Path:
    source = Path(os.environ.get("MNIST_DATA_DIR", "/nonexistent")) / "MNIST" / "raw"
    if not (source / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("real MNIST archives not available: set MNIST_DATA_DIR")
    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for path in source.glob("*.gz"):
        shutil.copy(path, raw / path.name)
        os.chmod(raw / path.name, 0o644)
    return tmp_path / "mnist"


@pytest.mark.real_data
def test_real_mnist_archives_are_verified_and_extracted(mnist_archives, monkeypatch):
    datamodule = MNISTDataModule(str(mnist_archives))
    datamodule.prepare_data()  # extracts
    datamodule.setup("fit")
    assert [len(dataset) for dataset in datamodule.datasets.values()] == [55_000, 5_000, 10_000]
    raw = mnist_archives / "MNIST" / "raw"
    for extracted in raw.glob("*-ubyte"):
        extracted.unlink()
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes((raw / "t10k-labels-idx1-ubyte.gz").read_bytes()[:-1])
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # offline: the damaged one cannot be replaced
    with pytest.raises(MisconfigurationException, match=r"Error downloading t10k-labels-idx1-ubyte\.gz"):
        MNISTDataModule(str(mnist_archives)).prepare_data()


@pytest.mark.real_data
def test_an_extracted_file_cut_short_beside_its_intact_archive_says_to_delete_it(mnist_archives):
    MNISTDataModule(str(mnist_archives)).prepare_data()  # extracts
    images = mnist_archives / "MNIST" / "raw" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:1_000_000])
    with pytest.raises(MisconfigurationException, match=r"delete those without \.gz"):
        MNISTDataModule(str(mnist_archives)).prepare_data()


@pytest.mark.real_data
def test_an_extracted_file_of_wrong_labels_beside_its_intact_archive_says_to_delete_it(mnist_archives):
    """Found by a new-user trial: a label 77 said "Replace them with the originals", which are there, intact."""
    MNISTDataModule(str(mnist_archives)).prepare_data()  # extracts
    labels = mnist_archives / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    data = bytearray(labels.read_bytes())
    data[8] = 77  # the first label, after the IDX header
    labels.write_bytes(bytes(data))
    with pytest.raises(MisconfigurationException, match=r"labels up to 77\. .* delete those without \.gz"):
        MNISTDataModule(str(mnist_archives)).prepare_data()
