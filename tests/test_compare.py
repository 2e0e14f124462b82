"""scripts/compare.py: the rungs run as separate processes, and their weights and losses are compared bit for bit
(timing is never tested). The three rungs' parity itself is tested in test_ladder.py. What starts a rung starts a
process: marked slow; compare.py's refusals, made before any rung starts, run in this process."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import example
import pytest
from helpers import FAKE_VAL
from test_ladder import run_in_process

pytestmark = [example.data, example.task]

ROOT = Path(__file__).resolve().parents[1]
COMPARE = ROOT / "scripts" / "compare.py"


def load_compare():
    """scripts/compare.py as a module: it stands on its own, outside the package."""
    spec = importlib.util.spec_from_file_location("compare", COMPARE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_compare(*flags: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, str(COMPARE), *flags]
    return subprocess.run(command, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": path}, timeout=600)


@pytest.mark.slow
def test_three_rungs_in_their_own_processes_side_by_side(fake_mnist, tmp_path):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "128", "--max_epochs", "2"]
    result = run_compare(*flags, "--lr", "0.005", "--seed", "11", "--output_dir", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert list(saved["rungs"]) == ["plain", "fabric", "trainer"]
    assert list(saved["parity"]) == ["plain vs fabric", "plain vs trainer", "fabric vs trainer"]
    for gap in saved["parity"].values():  # the defaults (Adam, cosine schedule) bit-identical on the three rungs
        assert gap["weights_equal"] and gap["losses_equal"], gap
        assert gap["max_weight_difference"] == gap["max_loss_difference"] == gap["max_test_difference"] == 0.0
    for summary in saved["rungs"].values():
        assert len(summary["train/loss"]) == 2 and summary["wall_seconds"] > 0 and summary["fit_seconds"] > 0
    assert set(saved["ratios_to_plain"]) == {"fabric", "trainer"}
    assert saved["settings"]["deterministic"] is True and saved["settings"]["compile"] is False  # booleans
    # Each run keeps its folder and its output beside the comparison.
    assert {path.name for path in (tmp_path / "cmp").iterdir()} >= {"plain_0", "plain_0.log", "trainer_0.log"}
    table = result.stdout
    assert table.count("bit-identical") == 3 and "Fabric vs Trainer" in table
    assert table.count("/ plain") == 3 and "Trainer" in table and "epoch 1" in table and "fit (s)" in table
    # Each run is announced as it starts, on stderr.
    assert result.stderr.splitlines()[:3] == [
        f"Running {name} (1 of 1)..." for name in ("plain PyTorch", "Fabric", "Trainer")
    ]


@pytest.mark.slow
def test_without_the_plain_rung_no_ratio_to_it_is_shown(fake_mnist, tmp_path, capsys):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "300", "--max_epochs", "1"]
    compare = load_compare()
    result = compare.compare(
        compare.parse_args([*flags, "--rungs", "fabric", "trainer", "--output_dir", str(tmp_path)])
    )
    assert capsys.readouterr().err.splitlines() == ["Running Fabric (1 of 1)...", "Running Trainer (1 of 1)..."]
    assert "ratios_to_plain" not in result and set(result["parity"]) == {"fabric vs trainer"}
    assert "/ plain" not in compare.format_table(result)


@pytest.mark.slow
def test_a_failing_rung_is_reported_with_its_own_words_and_status(fake_mnist, tmp_path):
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--output_dir", str(tmp_path / "c")]
    result = run_compare(*flags, "--rungs", "plain", "--weight_decay", "-1")  # refused by the optimizer
    assert result.returncode == 1, result.stderr  # the rung's own exit status
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: the plain PyTorch run failed: Invalid weight_decay value: -1.0")
    assert "Traceback" not in result.stderr
    assert (tmp_path / "c" / "plain_0.log").is_file() and str(tmp_path / "c" / "plain_0.log") in error


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--batch_size", "0"], "--batch_size must be at least 1, got 0"),
        (["--rungs", "fancy"], "argument --rungs: invalid choice: 'fancy'"),
        (["--output_dir", "used"], "holds an earlier run's files"),
    ],
)
def test_bad_options_and_a_used_folder_are_refused_before_any_rung_runs(tmp_path, capsys, monkeypatch, flags, phrase):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "metrics.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    result = run_in_process(capsys, "compare.py", "--data_dir", str(tmp_path), *flags)
    assert result.returncode == 2 and result.stderr.startswith("Error: ") and phrase in result.stderr
    assert result.stderr.count("\n") == 1 and "Running" not in result.stderr and result.stdout == ""  # one line
