"""DDP on two CPU processes, bf16 mixed and true precisions, and determinism, on the tests' own task (conftest.py's
``task``). The example's configs are tested in test_example_configs.py."""

import json
import subprocess

import pytest
from helpers import QUICK, command, command_environment, train_run

from mnist_lightning.core.evaluate import main as evaluate_main

VOLATILE = {"fit_seconds", "best_checkpoint", "peak_host_mb", "peak_gpu_mb", "history"}


def run(output_dir, *flags):
    return train_run("--output_dir", str(output_dir), *QUICK, *flags)


def test_bf16_mixed_precision_on_cpu(task, tmp_path):
    metrics = run(tmp_path / "bf16", "--accelerator", "cpu", "--precision", "bf16-mixed")
    assert metrics["precision"] == "bf16-mixed" and metrics["test/acc"] > 0.9


@pytest.mark.parametrize("precision", ["bf16-true", "64-true"])  # 16-true: Adam overflows it (test_resume)
def test_true_precisions_train_with_the_model_summary_shown(task, tmp_path, precision):
    """The model summary runs an example input through the network: it must be in the weights' dtype."""
    metrics = run(tmp_path / "run", "--precision", precision, "--enable_model_summary", "true")
    assert metrics["precision"] == precision and metrics["test/acc"] is not None


def test_same_seed_and_deterministic_runs_write_identical_metrics(task, tmp_path):
    flags = ["--accelerator", "cpu", "--seed", "7", "--deterministic", "true"]
    first, second = (run(tmp_path / name, *flags) for name in ("a", "b"))
    assert {k: v for k, v in first.items() if k not in VOLATILE} == {
        k: v for k, v in second.items() if k not in VOLATILE
    }
    losses = [[row["train/loss"] for row in m["history"]] for m in (first, second)]
    assert losses[0] == losses[1]
    assert run(tmp_path / "c", "--accelerator", "cpu", "--seed", "8")["history"] != first["history"]


@pytest.mark.slow
def test_ddp_with_two_cpu_processes(task, tmp_path, capsys):
    """Lightning's own DDP (gloo on CPU): one metrics.json from rank 0, metrics synced over both ranks: the same test
    metrics as the checkpoint tested in one process. (That each sample is tested once whatever the ranks is the data
    module's to do: test_example_ddp.py.)"""
    output_dir = tmp_path / "ddp"
    flags = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--output_dir", str(output_dir)]
    train = command("train", *flags, *QUICK)
    result = subprocess.run(train, env=command_environment(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    # Lightning's advice to a data module that lets it shard the test set (own_data.Points does) is the only one.
    advice = [line for line in result.stderr.splitlines() if "Warning" in line or "recommended" in line]
    assert all("DistributedSampler" in line for line in advice), advice
    metrics = json.loads((output_dir / "metrics.json").read_text())
    assert metrics["devices"] == 2 and metrics["test/acc"] > 0.9
    # The same checkpoint tested in one process (120 test points: the two ranks share them evenly, none repeated).
    one = ["--ckpt_path", metrics["best_checkpoint"], "--accelerator", "cpu", "--output_dir", str(tmp_path / "one")]
    assert evaluate_main(one) == 0, capsys.readouterr().err
    alone = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert metrics["test/acc"] == pytest.approx(alone["test/acc"], abs=1e-6)
    assert metrics["test/loss"] == pytest.approx(alone["test/loss"], rel=1e-5)
    # Each rank trained on its own half: 180 training points in batches of 32 -> 6 steps per rank per epoch.
    logged = (output_dir / "logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert [line for line in logged[1:] if line.split(",")[0]]  # the CSV logger wrote, once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "one"]  # no second run folder from rank 1
    assert result.stdout.count("Tested the best of 2 epochs: ") == 1  # only rank 0 prints the summary
    # evaluate.py on two processes too: one folder, rank 0's, with the training's test result.
    evaluate = ["--ckpt_path", metrics["best_checkpoint"], "--accelerator", "cpu", "--devices", "2"]
    evaluate += ["--output_dir", str(tmp_path / "evaluated")]
    result = subprocess.run(
        command("evaluate", *evaluate), env=command_environment(), cwd=tmp_path, capture_output=True, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert json.loads((tmp_path / "evaluated" / "metrics.json").read_text())["test/acc"] == metrics["test/acc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "evaluated", "one"]
    # A run stopped before its first checkpoint (its record alone) is started over by its resume command, by every
    # process: rank 1 too, which is given that command's --ckpt_path last by Lightning.
    unstarted = tmp_path / "unstarted"
    unstarted.mkdir()
    (unstarted / "config.yaml").write_bytes((output_dir / "config.yaml").read_bytes())
    resume = command("train", "--output_dir", str(unstarted), "--ckpt_path", "last")
    result = subprocess.run(resume, env=command_environment(), cwd=tmp_path, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert json.loads((unstarted / "metrics.json").read_text())["devices"] == 2
