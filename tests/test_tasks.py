"""Tasks other than the example's, end to end through every command (issue "Your task, not the example's"): a
regression (tasks.Regress on tasks.Curve: float targets, mean squared error, the best epoch the lowest val/loss) and a
multi-label classification (tasks.Tag on tasks.Tagged: the best epoch the highest val/f1). Each trains and tests the
best checkpoint by its own monitor and mode, resumes exactly after an interrupt, and its checkpoints evaluate, predict
(the columns its predict_step returns), export (the outputs of its forward) and start a new run (fine-tuning). What
core/ knows of a task is what its LightningModule says: nothing here names the example's metric."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import QUICK, STEPS_PER_EPOCH, one_line, own_task

from mnist_lightning.core import evaluate, export, predict
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.train import main

EPOCHS = 4
FLAGS = [*QUICK, "--max_epochs", str(EPOCHS), "--deterministic", "true"]


@dataclass
class Case:
    model: str
    data: str
    monitor: str
    mode: str  # ModelCheckpoint's: min or max
    outputs: int  # per sample, of its forward
    columns: list[str]  # predict's CSV: input, then the keys of the dict its predict_step returns
    tested: set[str]  # what its test logs


CASES = {
    "regress": Case("tasks.Regress", "tasks.Curve", "val/loss", "min", 1, ["input", "value"], {"test/loss"}),
    "tag": Case("tasks.Tag", "tasks.Tagged", "val/f1", "max", 3, ["input", "labels"], {"test/loss", "test/f1"}),
}


@dataclass
class Trained:
    case: Case
    run: Path
    metrics: dict


@pytest.fixture(scope="module", params=list(CASES))
def trained(request, tmp_path_factory) -> Trained:
    """The task's run, uninterrupted: what the other commands start from, and what an interrupted run must equal."""
    case, run = CASES[request.param], tmp_path_factory.mktemp(request.param) / "run"
    with own_task(case.model, case.data):
        assert main([*FLAGS, "--output_dir", str(run)]) == 0
    return Trained(case, run, json.loads((run / "metrics.json").read_text()))


def best_of(history: list[dict], monitor: str, mode: str) -> dict:
    """The epoch ModelCheckpoint keeps for ``monitor`` and ``mode``: the first of equals."""
    return (min if mode == "min" else max)(history, key=lambda row: row[monitor])


def weights(path) -> dict:
    return torch.load(path, weights_only=True)["state_dict"]


def test_the_best_checkpoint_by_the_tasks_own_monitor_is_tested(trained):
    case, metrics = trained.case, trained.metrics
    assert [row["epoch"] for row in metrics["history"]] == list(range(EPOCHS))
    best = best_of(metrics["history"], case.monitor, case.mode)
    name = f"best-epoch{best['epoch']:02d}-{case.monitor.rpartition('/')[2]}{best[case.monitor]:.4f}.ckpt"
    assert metrics["best_checkpoint"] == str(trained.run / "checkpoints" / name)
    assert metrics[f"best_{case.monitor}"] == pytest.approx(best[case.monitor])
    assert torch.load(metrics["best_checkpoint"], weights_only=True)["epoch"] == best["epoch"]  # the weights tested
    # What its test logs, and no name of the example's task.
    assert {name for name in metrics if name.startswith("test/")} == case.tested
    assert not [name for name in metrics if "/acc" in name]
    assert all(case.monitor in row and "train/loss" in row for row in metrics["history"])


def test_an_interrupted_run_resumed_ends_as_the_uninterrupted_one(task, trained, tmp_path, capsys):
    """SIGTERM in the middle of the second epoch, then the resume command it prints: with --deterministic true, the
    same weights, test metrics and history as the run never stopped."""
    case, run = trained.case, tmp_path / "run"
    task(case.model, case.data)
    stop = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "batch"]
    stop += ["--callbacks.step", str(STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2), "--callbacks.marker", str(tmp_path / "m")]
    assert main([*FLAGS, *stop, "--output_dir", str(run)]) == 143
    message = one_line(capsys.readouterr().err)
    assert "Stopped by SIGTERM: " in message and "holds the epochs finished before. Resume with: " in message, message
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0  # mid-epoch 1: epoch 0 kept
    resume = message.split("Resume with: ")[1].split()
    assert main(resume[resume.index("--output_dir") :]) == 0
    whole, resumed = weights(trained.run / "checkpoints" / "last.ckpt"), weights(run / "checkpoints" / "last.ckpt")
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[key], resumed[key]) for key in whole)
    metrics = json.loads((run / "metrics.json").read_text())
    assert {name: metrics[name] for name in case.tested} == {name: trained.metrics[name] for name in case.tested}
    assert Path(metrics["best_checkpoint"]).name == Path(trained.metrics["best_checkpoint"]).name
    measured = [{k: v for k, v in row.items() if k != "seconds"} for row in metrics["history"]]
    assert measured == [{k: v for k, v in row.items() if k != "seconds"} for row in trained.metrics["history"]]


def test_evaluate_tests_the_best_checkpoint_as_the_run_did(task, trained, tmp_path, capsys):
    task(trained.case.model, trained.case.data)
    evaluated = tmp_path / "evaluated"
    assert evaluate.main(["--ckpt_path", trained.metrics["best_checkpoint"], "--output_dir", str(evaluated)]) == 0
    metrics = json.loads((evaluated / "metrics.json").read_text())
    tested = {name: metrics[name] for name in trained.case.tested}
    assert tested == pytest.approx({name: trained.metrics[name] for name in trained.case.tested})
    assert metrics["best_checkpoint"] == trained.metrics["best_checkpoint"]
    scores = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items() if name.startswith("test/"))
    assert f"Tested: {scores}. Run folder: {evaluated}" in capsys.readouterr().out


def test_predict_writes_the_columns_of_the_tasks_predict_step(task, trained, tmp_path, capsys):
    task(trained.case.model, trained.case.data)
    best, output = trained.metrics["best_checkpoint"], tmp_path / "predictions.csv"
    assert predict.main(["--ckpt_path", best, "--output", str(output), "--batch_size", "16"]) == 0
    rows = list(csv.reader(output.open()))
    model, datamodule, _ = load_checkpoint(best)
    (samples,) = datamodule.sets["predict"].tensors
    assert rows[0] == trained.case.columns
    assert [row[0] for row in rows[1:]] == [f"predict_dataloader[{i}]" for i in range(len(samples))]
    assert f"Wrote {len(samples)} rows to {output}" in capsys.readouterr().out
    with torch.no_grad():
        expected = model.eval().predict_step((samples,), 0)
    for (name, values), column in zip(expected.items(), range(1, len(rows[0])), strict=True):
        assert rows[0][column] == name
        written = [json.loads(row[column]) for row in rows[1:]]  # a number, or a list of labels
        if isinstance(values, torch.Tensor):  # values per sample
            assert written == pytest.approx(values.tolist(), abs=1e-6)
        else:  # anything per sample: the labels on
            assert written == values and any(values), values


def test_export_gives_the_outputs_of_the_checkpoints_forward(task, trained, tmp_path):
    task(trained.case.model, trained.case.data)
    best, exported = trained.metrics["best_checkpoint"], tmp_path / "exported"
    assert export.main(["--ckpt_path", best, "--output_dir", str(exported), "--formats", "pt2"]) == 0
    spec = json.loads((exported / "preprocessing.json").read_text())
    assert spec["input"] == {"name": "input", "shape": ["batch", 2]}
    assert spec["output"] == {"name": "output", "shape": ["batch", trained.case.outputs]}
    served = torch.export.load(exported / "model.pt2").module()
    model, datamodule, _ = load_checkpoint(best)
    for samples in (datamodule.sets["predict"].tensors[0][:7], datamodule.sets["test"].tensors[0]):  # any batch size
        with torch.no_grad():
            torch.testing.assert_close(served(samples), model.eval()(samples))


def test_a_checkpoint_starts_a_new_run_from_its_weights(task, trained, tmp_path):
    """--ckpt_path <a .ckpt>: a new run of its own (epochs, steps, optimizer), from the checkpoint's weights."""
    task(trained.case.model, trained.case.data)
    best, run = trained.metrics["best_checkpoint"], tmp_path / "tuned"
    assert main([*QUICK, "--max_epochs", "1", "--lr", "1e-6", "--ckpt_path", best, "--output_dir", str(run)]) == 0
    assert f"ckpt_path: {best}\n" in (run / "config.yaml").read_text()
    metrics = json.loads((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == [0] and metrics["best_checkpoint"].startswith(str(run))
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == STEPS_PER_EPOCH
    started, tuned = weights(best), last["state_dict"]
    assert all(torch.allclose(tuned[key], started[key], atol=1e-4) for key in started)  # 12 steps of 1e-6 from it
    assert not all(torch.equal(tuned[key], started[key]) for key in started)  # and trained


@pytest.mark.parametrize(
    ("model", "data", "best_key"),
    [
        ("tasks.Classify", "own_data.Points", "best_val/acc"),
        ("tasks.Regress", "tasks.Curve", "best_val/loss"),
        ("tasks.Tag", "tasks.Tagged", "best_val/f1"),
    ],
    ids=["classify", "regress", "tag"],
)
def test_a_users_own_model_checkpoint_does_not_decide_what_is_tested(task, tmp_path, capsys, model, data, best_key):
    """`--callbacks ModelCheckpoint --callbacks.monitor train/loss --callbacks.mode min`: the user's checkpoints are
    written, and the run still tests the template's best by the model's own monitor, and records its score."""
    task(model, data)
    flags = [*QUICK, "--max_epochs", "3", "--batch_size", "128", "--deterministic", "true"]
    mine = ["--callbacks", "ModelCheckpoint", "--callbacks.monitor", "train/loss", "--callbacks.mode", "min"]
    mine += ["--callbacks.filename", "mine-{epoch}"]
    assert main([*flags, "--output_dir", str(tmp_path / "plain")]) == 0
    assert main([*flags, *mine, "--output_dir", str(tmp_path / "mine")]) == 0
    assert "\nTested the best of 3 epochs: " in capsys.readouterr().out
    plain, with_mine = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("plain", "mine"))
    assert list(tmp_path.glob("mine/**/mine-epoch=*.ckpt"))  # the user's callback did its work
    assert Path(with_mine["best_checkpoint"]).parent == tmp_path / "mine" / "checkpoints"
    assert Path(with_mine["best_checkpoint"]).name == Path(plain["best_checkpoint"]).name
    assert [name for name in with_mine if name.startswith("best_")] == [best_key, "best_checkpoint"]
    assert with_mine[best_key] == plain[best_key]
    tested = {name: value for name, value in with_mine.items() if name.startswith("test/")}
    assert tested and tested == {name: value for name, value in plain.items() if name.startswith("test/")}
