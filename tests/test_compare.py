"""scripts/compare.py: the three rungs run as separate processes and end bit-identical (timing is never tested)."""

import json

from helpers import FAKE_VAL

from mnist_lightning.compare import RUNGS, build_parser, compare, format_table, main


def test_three_rungs_in_their_own_processes_are_bit_identical(fake_mnist, tmp_path):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "128", "--max_epochs", "2"]
    flags += ["--lr", "0.005", "--seed", "11", "--output_dir", str(tmp_path / "cmp")]
    result = compare(build_parser().parse_args(flags))
    assert list(result["rungs"]) == ["plain", "fabric", "trainer"]
    assert list(result["parity"]) == ["plain vs fabric", "plain vs trainer", "fabric vs trainer"]
    for pair, gap in result["parity"].items():
        assert gap["weights_equal"] and gap["losses_equal"], pair
        assert gap["max_weight_difference"] == gap["max_loss_difference"] == gap["max_test_difference"] == 0.0
    assert all(len(summary["train/loss"]) == 2 and summary["wall_seconds"] > 0 for summary in result["rungs"].values())
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert saved["parity"] == result["parity"] and set(saved["ratios_to_plain"]) == {"fabric", "trainer"}
    table = format_table(result)
    assert table.count("bit-identical") == 3 and "Trainer" in table and "epoch 1" in table
    assert table.count("/ plain") == 2


def test_without_the_plain_rung_no_ratio_to_it_is_shown(fake_mnist, tmp_path, capsys):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "300", "--max_epochs", "1"]
    result = compare(build_parser().parse_args([*flags, "--rungs", "fabric", "trainer", "--output_dir", str(tmp_path)]))
    # Each run is announced as it starts, on stderr.
    assert capsys.readouterr().err.splitlines() == ["Running Fabric (1 of 1)...", "Running Trainer (1 of 1)..."]
    assert "ratios_to_plain" not in result and result["parity"]["fabric vs trainer"]["weights_equal"]
    assert "/ plain" not in format_table(result)


def test_a_failing_rung_is_reported_not_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(RUNGS, "trainer", "json.tool")  # a module that exits non-zero at once on these flags
    flags = ["--data_dir", str(tmp_path / "nothing"), "--rungs", "trainer", "--output_dir", str(tmp_path / "c")]
    assert main(flags) == 2  # the rung's own exit status
    err = " ".join(capsys.readouterr().err.split())
    assert "The Trainer run failed: usage: python -m json.tool" in err and "--output_dir" not in err


def test_bad_options_and_a_used_folder_are_refused_before_any_rung_runs(tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "metrics.json").write_text("{}")
    for flags, phrase in [
        (["--repeats", "0"], "--repeats: 0 is out of range: it must be at least 1"),
        (["--batch_size", "0"], "--batch_size: 0 is out of range"),
        (["--output_dir", str(used)], "already holds files from an earlier run"),
    ]:
        assert main(["--data_dir", str(tmp_path), *flags]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert phrase in err and "Traceback" not in err and "--ckpt_path" not in err
