"""Every data file is verified before it is used: archives by MD5, extracted files against their archive or a
known MD5 sum, and every file as the IDX file it is named after. A wrong file is named in one paragraph (exit 1)
before any training, and no run folder is left."""

import gzip
import hashlib
import os
import shutil
from pathlib import Path

import pytest
from helpers import TINY_RUN, one_line, write_fake_mnist

from mnist_lightning import data
from mnist_lightning.train import main

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_sums(raw: Path) -> None:
    """Declare the files' MD5 sums, as data of one's own in MNIST's format does (md5sum *-ubyte > MD5SUMS)."""
    lines = [f"{hashlib.md5((raw / name).read_bytes()).hexdigest()}  {name}" for name in FILES]
    (raw / data.SUMS_FILE).write_text("\n".join(lines) + "\n")


def fake_data_with_sums(root: Path) -> Path:
    write_fake_mnist(root)
    write_sums(root / "MNIST" / "raw")
    return root


@pytest.fixture
def fake(tmp_path) -> Path:
    return fake_data_with_sums(tmp_path / "data")


def train(data_dir, output_dir) -> int:
    return main(["--data.data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_RUN, "--quiet", "true"])


def refused(capsys, code, output_dir, *phrases):
    captured = capsys.readouterr()
    message = one_line(captured.err)
    assert code == 1, message
    assert "Traceback" not in captured.err + captured.out
    assert message.startswith("Error:") and message.count("Error:") == 1
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    assert not output_dir.exists()


def test_declared_fake_data_trains(fake, tmp_path):
    assert train(fake, tmp_path / "run") == 0


def test_extracted_files_that_are_not_mnists_own_are_refused(tmp_path, capsys):
    root = write_fake_mnist(tmp_path / "data", declare_sums=False)  # no archives, no MD5SUMS, not MNIST's own files
    code = train(root, tmp_path / "run")
    refused(capsys, code, tmp_path / "run", "train-images-idx3-ubyte is not the file it is named after")


def test_extracted_files_of_a_dataset_without_known_sums_are_refused(tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(write_fake_mnist(tmp_path / "fake", declare_sums=False) / "MNIST", root / "KMNIST")
    code = main(
        ["--data.data_dir", str(root), "--data.dataset", "kmnist", "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    )
    refused(capsys, code, tmp_path / "run", "train-images-idx3-ubyte cannot be verified", "MD5SUMS")


@pytest.mark.parametrize(
    ("damage", "phrases"),
    [
        ("swap", ["train-labels-idx1-ubyte is not the file it is named after", "MD5SUMS"]),
        ("empty", ["train-labels-idx1-ubyte is not the file it is named after"]),
    ],
)
def test_a_wrong_file_under_the_right_name_is_refused(fake, tmp_path, capsys, damage, phrases):
    raw = fake / "MNIST" / "raw"
    if damage == "swap":
        shutil.copy(raw / "t10k-labels-idx1-ubyte", raw / "train-labels-idx1-ubyte")
    else:
        (raw / "train-labels-idx1-ubyte").write_bytes(b"")
    refused(capsys, train(fake, tmp_path / "run"), tmp_path / "run", *phrases)


def test_declared_files_must_still_be_valid_idx_files(fake, tmp_path, capsys):
    raw = fake / "MNIST" / "raw"
    shutil.copy(raw / "t10k-labels-idx1-ubyte", raw / "train-labels-idx1-ubyte")  # declared, but 300 labels
    write_sums(raw)
    refused(capsys, train(fake, tmp_path / "run"), tmp_path / "run", "holds 1200 images but", "300 labels")
    (raw / "train-labels-idx1-ubyte").write_bytes(b"")
    write_sums(raw)
    refused(capsys, train(fake, tmp_path / "run"), tmp_path / "run", "is not a valid labels file")


def test_a_malformed_sums_file_is_named(fake, tmp_path, capsys):
    (fake / "MNIST" / "raw" / data.SUMS_FILE).write_text("not a sum line\n")
    refused(capsys, train(fake, tmp_path / "run"), tmp_path / "run", "MD5SUMS, line 1", "md5sum's format")


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
def test_real_mnist_extracted_files_are_checked_against_their_archives(mnist_archives):
    data.download(mnist_archives)  # extracts, then verifies
    raw = mnist_archives / "MNIST" / "raw"
    labels = raw / "t10k-labels-idx1-ubyte"
    original = labels.read_bytes()
    labels.write_bytes(original[:-1] + bytes([(original[-1] + 1) % 10]))  # one label changed
    data.download(mnist_archives)  # the archive is the verified original: the copy is made again
    assert labels.read_bytes() == original
    labels.write_bytes(original[: len(original) // 2])  # an extraction cut short
    data.download(mnist_archives)
    assert labels.read_bytes() == original
    for archive in raw.glob("*.gz"):  # extracted files only: MNIST's known sums
        archive.unlink()
    data.download(mnist_archives)
    labels.write_bytes(original[:-1] + bytes([(original[-1] + 1) % 10]))
    with pytest.raises(data.DataError, match="is not the file it is named after"):
        data.download(mnist_archives)


@pytest.mark.real_data
def test_a_read_only_folder_of_archives_gets_advice_that_fits(mnist_archives):
    raw = mnist_archives / "MNIST" / "raw"
    os.chmod(raw, 0o555)
    try:
        if os.access(raw, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(data.DataError, match="read-only") as error:
            data.download(mnist_archives)
        assert "Copy" in str(error.value) and "--data.data_dir" in str(error.value)
    finally:
        os.chmod(raw, 0o755)


def test_a_damaged_archive_is_still_named(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"not MNIST"))
    with pytest.raises(data.DataError, match=r"train-labels-idx1-ubyte\.gz is damaged"):
        data.download(tmp_path)
