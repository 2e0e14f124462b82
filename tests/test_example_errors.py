"""The example's own refusals (the README's error table, for MNIST's data module and the Classifier): its options'
bounds and choices, its network-size check and its cosine schedule's need of an end, MNIST's missing or damaged files.
Each is one paragraph (or the parser's message), exits non-zero and writes nothing. The machinery's refusals, on the
tests' own task: tests/test_errors.py."""

import gzip

import example
import pytest
from helpers import TINY_RUN, one_line
from test_errors import assert_clean_failure
from torchvision.datasets import MNIST

from mnist_lightning.core.train import main

pytestmark = [example.data, example.task]

# (flags, exit status, phrases the message must contain): the option and the value, as the library names them.
EXAMPLE_BAD_FLAGS = [
    # The parser's (pydantic's bounds on the Classifier's and MNIST's options) refusals
    (["--lr", "-1"], 2, ['"lr"', "-1"]),
    (["--lr", "-inf"], 2, ["--lr"]),
    (["--momentum", "1.5"], 2, ['"momentum"', "1.5"]),
    (["--weight_decay", "-1"], 2, ['"weight_decay"', "-1"]),
    (["--optimizer", "rmsprop"], 2, ['"optimizer"', "rmsprop"]),
    (["--lr_schedule", "linear"], 2, ['"lr_schedule"', "linear"]),
    (["--data.dataset", "svhn"], 2, ['"dataset"', "svhn"]),
    (["--data.val_size", "0"], 2, ['"val_size"', "0"]),
    (["--data.valsize", "9"], 2, ["'valsize'"]),
    # The example's own paragraphs (MisconfigurationException of its code, or MNIST's data module)
    (["--max_epochs", "-1"], 2, ["--max_epochs -1 gives the cosine schedule no end", "--max_steps"]),
    (["--net", "torch.nn.Identity"], 2, ["Identity gives", "scores, not 10."]),  # MNIST's ten classes
    (["--data.val_size", "70000"], 2, ["--data.val_size must be between 1 and 1199", "got 70000"]),
]


def run(fake_mnist, output_dir, *flags) -> int:
    return main(["--data.data_dir", str(fake_mnist), "--output_dir", str(output_dir), *TINY_RUN, *flags])


@pytest.mark.parametrize(
    ("flags", "expected_code", "phrases"), EXAMPLE_BAD_FLAGS, ids=[" ".join(f) for f, _, _ in EXAMPLE_BAD_FLAGS]
)
def test_bad_flags_of_the_example(fake_mnist, tmp_path, capsys, monkeypatch, flags, expected_code, phrases):
    monkeypatch.chdir(tmp_path)
    code = run(fake_mnist, tmp_path / "run", *flags)
    assert_clean_failure(capsys, code, expected_code, phrases, tmp_path / "run")


def test_a_bound_of_the_example_in_a_config_file(fake_mnist, tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("lr: .nan\n")
    code = run(fake_mnist, tmp_path / "run", "--config", str(tmp_path / "bad.yaml"))
    assert_clean_failure(capsys, code, 2, ['"lr"', "nan"], tmp_path / "run")


def test_a_data_mistake_is_reported_before_lightnings_banners(fake_mnist, tmp_path, capfd):
    assert run(fake_mnist, tmp_path / "run", "--data.val_size", "5000") == 2
    err = capfd.readouterr().err
    assert err.startswith("Error: --data.val_size must be between 1 and 1199") and "GPU available" not in err


def test_missing_mnist_without_network_names_the_folder_and_files(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", [])  # as offline: every download attempt fails
    code = main(["--data.data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run"), *TINY_RUN])
    err = capsys.readouterr().err
    message = one_line(err[err.index("Error:") :])  # the last paragraph, after Lightning's banners
    assert code == 1 and "Traceback" not in err and message.count("Error:") == 1, err
    assert str((tmp_path / "data" / "MNIST" / "raw").resolve()) in message
    assert not (tmp_path / "data").exists()  # no empty folders left
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert name in message
    assert not (tmp_path / "run").exists()


def test_a_damaged_mnist_file_is_refused_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", [])  # offline: torchvision cannot download the original over it
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"not MNIST"))
    code = main(["--data.data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run"), *TINY_RUN])
    message = one_line(capsys.readouterr().err)
    assert code == 1 and "Error downloading train-images-idx3-ubyte.gz" in message and str(raw) in message
    assert not (tmp_path / "run").exists()
