"""scripts/compare.py: both sides run as separate processes; their training losses agree (timing is not tested)."""

import json

from helpers import FAKE_VAL

from mnist_lightning.compare import SIDES, build_parser, compare, format_table, main


def test_lightning_and_plain_agree_epoch_by_epoch(fake_mnist, tmp_path):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "100", "--max_epochs", "3"]
    result = compare(build_parser().parse_args([*flags, "--repeats", "1", "--output_dir", str(tmp_path / "cmp")]))
    lightning, plain = result["lightning"], result["plain"]
    assert len(lightning["train/loss"]) == len(plain["train/loss"]) == 3
    assert result["max_train_loss_difference"] <= 1e-5
    assert abs(lightning["test/acc"] - plain["test/acc"]) <= 1e-6
    assert lightning["epoch_seconds"] > 0 and plain["epoch_seconds"] > 0
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["epoch_time_ratio"] > 0
    table = format_table(result)
    assert "Lightning/plain epoch time" in table and "epoch 2" in table


def test_a_failing_side_is_reported_not_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(SIDES, "lightning", "json.tool")  # a module that exits non-zero at once on these flags
    assert main(["--data_dir", str(tmp_path / "nothing"), "--repeats", "1", "--output_dir", str(tmp_path / "c")]) == 1
    assert "The lightning run failed" in " ".join(capsys.readouterr().err.split())
