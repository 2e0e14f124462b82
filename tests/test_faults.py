"""Interrupted runs, end to end as a user lives them: Ctrl-C, SIGTERM or kill -9 at a chosen moment, then the
command the run printed (pasted through a shell) or the README's resume command; the finished run must equal
an uninterrupted one: same final weights, same test metrics, every epoch once in metrics.json. On the tests' own task
(conftest.py's ``task``): own_data.Points, read in a shuffled order, and tasks.Classify, whose network draws dropout
masks: both from the random generators that a resume must restore."""

import json
import signal
from pathlib import Path

import pytest
import torch
from interrupts import compare_runs, interrupt_and_resume, start, train_command

pytestmark = pytest.mark.slow

EPOCHS = 6  # of 12 steps: own_data.Points' 360 training points in batches of 30


@pytest.fixture
def flags(task) -> list[str]:
    return ["--batch_size", "30", "--net.dropout", "0.3", "--enable_progress_bar", "false"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The same run, never stopped: made once, by the first test that asks (its ``task`` set)."""
    made = {}

    def whole(flags: list[str]) -> Path:
        if "run" not in made:
            made["run"] = tmp_path_factory.mktemp("whole") / "run"
            process = start(train_command([*flags, "--max_epochs", str(EPOCHS)], made["run"]))
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr[-3000:]
        return made["run"]

    return whole


def signal_at(name: str, moment: str, marker, **where) -> list[str]:
    options = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", name, "--callbacks.moment", moment]
    options += ["--callbacks.marker", str(marker)]
    for key, value in where.items():
        options += [f"--callbacks.{key}", str(value)]
    return options


def assert_same_as_uninterrupted(run, whole):
    comparison = compare_runs(run, whole)
    assert comparison["max_weight_difference"] == 0.0, comparison
    assert all(interrupted == kept for interrupted, kept in comparison["scores"].values()), comparison
    assert {"test/acc", "test/loss", "best_val/acc"} <= comparison["scores"].keys(), comparison
    assert comparison["history_epochs"] == list(range(EPOCHS))
    assert set(comparison["max_history_difference"].values()) == {0.0}, comparison
    assert {"train/loss", "val/loss", "val/acc"} <= comparison["max_history_difference"].keys(), comparison
    metrics = json.loads((run / "metrics.json").read_text())  # valid JSON; the whole run's time
    assert metrics["fit_seconds"] >= sum(row["seconds"] for row in metrics["history"]) * 0.5


CASES = [
    ("SIGINT", "batch", {"step": 30}, 130),  # mid-epoch (12 steps per epoch)
    ("SIGTERM", "batch", {"step": 42}, 143),
    ("SIGTERM", "validation", {"epoch": 2}, 143),  # the epoch's validation runs to its end, then the run stops
    ("SIGINT", "validation", {"epoch": 1}, 130),
    ("SIGTERM", "train_end", {}, 143),  # after the fit's last check for a stop: the run stops before its test
    ("SIGKILL", "checkpoint", {"epoch": 3}, -9),  # while last.ckpt of epoch 3 is being saved
    ("SIGKILL", "batch", {"step": 5}, -9),  # before the first checkpoint: the resume command starts it over
]


@pytest.mark.parametrize(("name", "moment", "where", "exit_code"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_interrupted_then_resumed_equals_uninterrupted(flags, uninterrupted, tmp_path, name, moment, where, exit_code):
    run = tmp_path / "run"
    options = [*flags, "--max_epochs", str(EPOCHS), *signal_at(name, moment, tmp_path / "fired", **where)]
    # The interrupt comes from inside (SignalAt), at its exact moment; the harness only waits (delay: forever).
    campaign = interrupt_and_resume(options, run, [(name, 10_000)])
    (event,) = campaign.interrupts
    assert (tmp_path / "fired").exists() and event.exit_code == exit_code, event.stderr_tail
    assert "Traceback" not in event.stderr_tail
    if name != "SIGKILL":  # the train command as it was started, scripts/train.py, with the modules' PYTHONPATH
        assert event.printed_resume and " python scripts/train.py --output_dir " in event.printed_resume
    assert campaign.final_exit_code == 0, campaign.final_stderr
    assert "Traceback" not in campaign.final_stderr and "Warning" not in campaign.final_stderr
    assert_same_as_uninterrupted(run, uninterrupted(flags))
    assert len(list(run.glob("logs/version_*"))) <= 2  # Lightning's CSV logs: a folder per segment


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_mid_epoch_keeps_the_last_finished_epoch(flags, tmp_path, name):
    """Ctrl-C stops at once, SIGTERM after the batch in progress (Lightning's own handling); neither writes a
    checkpoint of half an epoch. Step 30 is in epoch 2 (12 steps an epoch): last.ckpt stays the end of epoch 1."""
    run = tmp_path / "run"
    process = start(
        train_command([*flags, "--max_epochs", "200", *signal_at(name, "batch", tmp_path / "m", step=30)], run)
    )
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + getattr(signal, name) and "Traceback" not in stderr, stderr[-3000:]
    assert "holds the epochs finished before. Resume with:" in stderr
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_while_the_fit_sets_up_stops_the_run(flags, tmp_path, name):
    """Before Lightning installs its own SIGTERM handler (which resets what it noted), a SIGTERM is still a stop."""
    run = tmp_path / "run"
    process = start(train_command([*flags, "--max_epochs", "3", *signal_at(name, "setup", tmp_path / "m")], run))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + getattr(signal, name) and "Traceback" not in stderr, stderr[-3000:]
    assert "nothing to resume" in stderr and not run.exists()


def test_ctrl_c_while_last_ckpt_is_written_keeps_the_previous_one(flags, uninterrupted, tmp_path):
    run = tmp_path / "run"
    ctrl_c = signal_at("SIGINT", "checkpoint", tmp_path / "fired", epoch=2)
    process = start(train_command([*flags, "--max_epochs", str(EPOCHS), *ctrl_c], run))
    _, stderr = process.communicate(timeout=300)
    assert (tmp_path / "fired").exists() and process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Resume with:" in stderr
    assert not list(run.glob("checkpoints/.*partial"))
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1  # end of epoch 1
    resumed = start(train_command(["--ckpt_path", "last"], run))
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert_same_as_uninterrupted(run, uninterrupted(flags))


def test_a_stop_prints_only_what_the_user_needs(flags, tmp_path):
    run = tmp_path / "run"
    sigterm = signal_at("SIGTERM", "batch", tmp_path / "marker", step=30)
    process = start(train_command([*flags, "--max_epochs", str(EPOCHS), *sigterm], run))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143 and "Resume with:" in stderr
    for noise in ("weights_only", "warning", "traceback", "error"):
        assert noise not in stderr.lower(), stderr


def test_random_moments_a_few_points(flags, uninterrupted, tmp_path):
    """A few interrupts, each signal at a moment chosen at random."""
    from interrupts import random_moments

    run = tmp_path / "run"
    moments = random_moments(3, seed=7, longest=8.0)  # a process spends its first seconds importing
    campaign = interrupt_and_resume([*flags, "--max_epochs", str(EPOCHS)], run, moments)
    assert all(campaign.resumed()), campaign.as_dict()
    assert campaign.final_exit_code == 0 or campaign.finished_early, campaign.final_stderr
    assert_same_as_uninterrupted(run, uninterrupted(flags))


@pytest.mark.parametrize(("model", "data"), [("tasks.Regress", "tasks.Curve"), ("tasks.Tag", "tasks.Tagged")])
def test_another_tasks_run_resumes_exactly(task, tmp_path, model, data):
    """A regression (the best epoch the lowest val/loss) and a multi-label task (the highest val/f1), stopped by
    SIGTERM mid-epoch and resumed by the printed command, end as the run never stopped."""
    task(model, data)
    flags = ["--batch_size", "30", "--net.dropout", "0.3", "--enable_progress_bar", "false", "--max_epochs", "4"]
    whole = tmp_path / "whole"
    process = start(train_command(flags, whole))
    assert process.wait(timeout=300) == 0
    run = tmp_path / "run"
    sigterm = signal_at("SIGTERM", "batch", tmp_path / "fired", step=18)  # in the middle of the second epoch
    campaign = interrupt_and_resume([*flags, *sigterm], run, [("SIGTERM", 10_000)])  # the harness only waits
    assert campaign.interrupts[0].exit_code == 143 and campaign.final_exit_code == 0, campaign.final_stderr
    comparison = compare_runs(run, whole)
    assert comparison["max_weight_difference"] == 0.0 and comparison["history_epochs"] == [0, 1, 2, 3], comparison
    assert all(interrupted == kept for interrupted, kept in comparison["scores"].values()), comparison
    assert set(comparison["max_history_difference"].values()) == {0.0}, comparison
    monitored = {"tasks.Regress": "best_val/loss", "tasks.Tag": "best_val/f1"}[model]
    assert monitored in comparison["scores"] and "test/acc" not in comparison["scores"], comparison
