"""A data module of one's own, in one's own file, through all five commands with no file of the project changed:
train, resume, evaluate, predict and export, for 2-D points of 3 classes (own_data.Points, with own_data.MLP) and for
3-channel 32x32 images of 4 classes (own_data.TinyImages, with own_data.TinyCNN), passed by ``--data`` to the tests'
own LightningModule (tasks.Classify: conftest.py's ``task``), as a user passes theirs.

The sizes of the network, the metrics and the export come from the data module: nothing here is MNIST-shaped.
The scripts run as a user runs them, in their own process with tests/ on PYTHONPATH (tests/command.py); the quick
refusals run in-process, as the project's other tests do.
"""

import csv
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np  # only with_digit_photos
import pytest
import torch
import yaml
from helpers import command, command_environment, one_line, own_task
from lightning.pytorch import LightningDataModule

import mnist_lightning.core.evaluate as evaluate_module
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.evaluate import main as evaluate_main
from mnist_lightning.core.export import main as export_main
from mnist_lightning.core.predict import main as predict_main
from mnist_lightning.core.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["--enable_progress_bar", "false"]


@dataclass
class Case:
    data: str  # the class path given to --data
    flags: list[str]  # the rest of the user's train command
    num_classes: int
    input_shape: list[int]
    samples: int  # the data module's default number of samples
    predict_rows: int  # samples in its predict set
    other: str  # another data module's class path, for a change refused on resume


CASES = {
    # 36 Adam steps on 2-D points: a larger learning rate than the task's default.
    "points": Case(
        data="own_data.Points",
        flags=["--lr", "0.1"],
        num_classes=3,
        input_shape=[2],
        samples=600,
        predict_rows=60,
        other="own_data.TinyImages",
    ),
    "images": Case(
        data="own_data.TinyImages",
        flags=["--net", "own_data.TinyCNN", "--net.width", "4", "--lr", "0.02"],  # at the task's 0.05 it can collapse
        num_classes=4,
        input_shape=[3, 32, 32],
        samples=400,
        predict_rows=24,
        other="own_data.Points",
    ),
}


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python tests/command.py <name> ARGS`` (the project's scripts/<name>.py on the tests' own task) from the
    project's folder, with the user's module on PYTHONPATH."""
    return subprocess.run(
        command(name, *args), cwd=ROOT, env=command_environment(), capture_output=True, text=True, timeout=300
    )


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def one_paragraph(err: str) -> str:
    """The single "Error: ..." paragraph a refusal prints, as one line."""
    text = err.strip()
    assert text.startswith("Error: ") and text.count("Error:") == 1, err
    assert "\n\n" not in text and "Traceback" not in text, err
    return one_line(text)


def users_traceback(err: str, hook: str, file: str = "own_data.py") -> str:
    """An error of the user's own code: one line naming their hook, then Python's traceback through their file."""
    text = err[err.index("Error: ") :]
    assert re.match(rf"Error: {hook}\(\) of your code raised ", text), err
    assert "Traceback (most recent call last)" in text and str(Path(__file__).parent / file) in text, err
    return text


def after_banners(err: str) -> str:
    """The refusal's paragraph after Lightning's banners (a Trainer is made before the data is read)."""
    return one_paragraph("Error: " + err.split("Error: ", 1)[-1])


def data_module(run: "Run"):
    """The user's data module as the run recorded it, built and set up here, for what its sets hold."""
    module_name, class_name = run.case.data.rsplit(".", 1)
    arguments = yaml.safe_load((run.folder / "config.yaml").read_text())["data"].get("init_args") or {}
    datamodule = getattr(importlib.import_module(module_name), class_name)(**arguments)
    datamodule.setup("predict")
    return datamodule


@dataclass
class Run:
    case: Case
    folder: Path
    metrics: dict

    @property
    def last(self) -> str:
        return str(self.folder / "checkpoints" / "last.ckpt")


@pytest.fixture(scope="module", params=list(CASES))
def run(request, tmp_path_factory) -> Run:
    """``python scripts/train.py --data <class path> --batch_size 32 --max_epochs 3 ...`` in its own process."""
    case = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param) / "run"
    flags = ["--data", case.data, "--batch_size", "32", "--max_epochs", "3", "--output_dir", str(folder), *QUIET]
    with own_task():
        result = succeeded(script("train", *flags, *case.flags))
    metrics = json.loads((folder / "metrics.json").read_text())
    assert f"Tested the best of 3 epochs: test/loss {metrics['test/loss']:.4f}, test/acc" in result.stdout
    return Run(case, folder, metrics)


@pytest.mark.slow
def test_train_learns_and_sizes_everything_from_the_data_module(task, run):
    case = run.case
    assert run.metrics["test/acc"] >= 0.9  # the classes are easy: it must learn them
    assert run.metrics["epochs"] == 3 and len(run.metrics["history"]) == 3 and run.metrics["batch_size"] == 32
    record = yaml.safe_load((run.folder / "config.yaml").read_text())
    assert record["data"]["class_path"] == case.data and record["batch_size"] == 32
    contents = torch.load(run.last, map_location="cpu", weights_only=True)
    hparams = contents["hyper_parameters"]
    assert hparams["num_classes"] == case.num_classes and list(hparams["input_shape"]) == case.input_shape
    assert contents["datamodule_hyper_parameters"]["_class_path"] == case.data
    # The network is built for the data's sizes, and so are the task's metrics.
    model = load_checkpoint(run.last).model
    assert model(torch.randn(5, *case.input_shape)).shape == (5, case.num_classes)
    assert model.test_acc.num_classes == case.num_classes


@pytest.mark.slow
def test_evaluate_reproduces_the_test_metrics(task, run, tmp_path):
    assert evaluate_main(["--ckpt_path", run.metrics["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert written["test/acc"] == run.metrics["test/acc"]
    assert written["test/loss"] == pytest.approx(run.metrics["test/loss"])


@pytest.mark.slow
def test_evaluate_takes_any_argument_of_the_data_module(task, run, tmp_path, monkeypatch):
    tested = []

    def spy(config):
        tested.append(real(config))
        return tested[-1]

    real = evaluate_module.load_with_overrides
    monkeypatch.setattr(evaluate_module, "load_with_overrides", spy)
    flags = ["--ckpt_path", run.last, "--output_dir", str(tmp_path / "e"), "--data.samples", "900"]
    assert evaluate_main([*flags, "--batch_size", "50"]) == 0
    ((_, datamodule, _),) = tested
    assert len(datamodule.test_dataloader().dataset) == 180  # 20 % of 900 samples
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert written["batch_size"] == 50 and written["test/acc"] >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "named"),
    [(["--data.samples", "many"], "samples"), (["--data.colour", "red"], "colour")],
)
def test_a_bad_data_override_is_one_paragraph(task, run, tmp_path, capsys, override, named):
    assert evaluate_main(["--ckpt_path", run.last, "--output_dir", str(tmp_path / "e"), *override]) == 2
    assert named in one_paragraph(capsys.readouterr().err)
    assert not (tmp_path / "e").exists()


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def check_probabilities(rows: list[dict], classes: int) -> list[int]:
    """Each predicted row's confidence is the probability of its class, the largest: at least 1/classes; the
    predictions."""
    for row in rows:
        assert 1 / classes - 1e-6 <= float(row["confidence"]) <= 1
    return [int(row["prediction"]) for row in rows]


@pytest.mark.slow
def test_predict_without_inputs_predicts_the_predict_dataloader(task, run, tmp_path):
    case, output = run.case, tmp_path / "predictions.csv"
    result = succeeded(script("predict", "--ckpt_path", run.last, "--output", str(output)))
    assert f"Wrote {case.predict_rows} rows to {output}" in result.stdout
    columns, rows = read_csv(output)
    assert columns == ["input", "prediction", "confidence"]  # what the task's predict_step returns
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(case.predict_rows)]
    predictions = check_probabilities(rows, case.num_classes)
    # The predict set is the first test samples, in order: the predictions must be their classes.
    labels = data_module(run).sets["test"].tensors[1][: case.predict_rows].tolist()
    assert sum(p == label for p, label in zip(predictions, labels, strict=True)) >= 0.9 * len(labels)


# with_digit_photos:
@pytest.mark.slow
@pytest.mark.parametrize("run", ["images"], indirect=True)
def test_predict_reads_files_through_the_data_modules_read_file(task, run, tmp_path):
    images, labels = data_module(run).sets["test"].tensors
    torch.save(images[:5].clone(), tmp_path / "five.pt")
    np.save(tmp_path / "one.npy", images[5].numpy())
    folder = tmp_path / "folder"
    folder.mkdir()
    torch.save(images[6].clone(), folder / "six.pt")
    (folder / "notes.txt").write_text("not an image")  # can_read says no: left out, not skipped
    torch.save(torch.zeros(4, 2), tmp_path / "points.pt")  # the wrong shape: read_file refuses it
    inputs = [str(tmp_path / name) for name in ("five.pt", "one.npy", "folder", "points.pt")]
    output = tmp_path / "predictions.csv"
    result = succeeded(script("predict", *inputs, "--ckpt_path", run.last, "--output", str(output)))
    skipped = f"Skipped {tmp_path / 'points.pt'}: expected images of shape (3, 32, 32), got (4, 2)."
    assert one_line(result.stderr).endswith(skipped) and "notes.txt" not in result.stderr  # on stderr only
    columns, rows = read_csv(output)
    names = [*(f"{tmp_path / 'five.pt'}[{i}]" for i in range(5)), str(tmp_path / "one.npy"), str(folder / "six.pt")]
    assert columns == ["input", "prediction", "confidence"] and [row["input"] for row in rows] == names
    assert check_probabilities(rows, 4) == labels[:7].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["points"], indirect=True)
def test_predict_on_files_is_refused_for_a_data_module_without_read_file(task, run, tmp_path, capsys):
    (tmp_path / "points.pt").write_bytes(b"")
    assert predict_main([str(tmp_path / "points.pt"), "--ckpt_path", run.last]) == 2
    message = one_paragraph(capsys.readouterr().err)
    assert (
        message == "Error: Points reads no files (it has no read_file): predict without inputs, or add read_file to it."
    )


def test_predict_skips_a_file_whose_samples_the_model_cannot_take(task, tmp_path, capsys):
    """One file of rows too wide (read_file does not check) is skipped with the reason; the others are predicted."""
    run = tmp_path / "run"
    flags = ["--data", "own_data.PointFiles", "--batch_size", "64", "--max_epochs", "1", "--output_dir", str(run)]
    assert train_main([*flags, *QUIET]) == 0
    (tmp_path / "good.csv").write_text("-3,0\n3,0\n")
    (tmp_path / "wide.csv").write_text("1,2,3\n")
    inputs = [str(tmp_path / "good.csv"), str(tmp_path / "wide.csv")]
    capsys.readouterr()
    assert predict_main([*inputs, "--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"Skipped {inputs[1]}: read as a batch of shape (1, 3), not of samples (2,).\n"
    assert [row["input"] for row in csv.DictReader(captured.out.splitlines())] == [f"{inputs[0]}[{i}]" for i in (0, 1)]


# end with_digit_photos
def test_predict_without_inputs_on_a_data_module_without_a_predict_set_says_what_to_add(task, tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--data", "own_data.TrainOnly", "--batch_size", "64", "--max_epochs", "1", "--output_dir", str(run)]
    assert train_main([*flags, *QUIET]) == 0
    capsys.readouterr()
    assert predict_main(["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 2
    message = one_paragraph(capsys.readouterr().err)  # Lightning's own words
    assert "`predict_dataloader` must be implemented" in message and "Traceback" not in message


def test_predict_takes_a_predict_dataloader_given_its_batch_size_by_position(task, tmp_path, capsys):
    """`DataLoader(dataset, 32)` is torch's own signature: predict.py predicts it as any other."""
    run = tmp_path / "run"
    flags = ["--data", "own_data.Positional", "--batch_size", "16", "--max_epochs", "1", "--output_dir", str(run)]
    assert train_main([*flags, *QUIET]) == 0
    capsys.readouterr()
    assert predict_main(["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 0, capsys.readouterr().err
    assert len(list(csv.DictReader(capsys.readouterr().out.splitlines()))) == 60


@pytest.mark.slow
def test_export_gives_the_checkpoints_outputs_for_the_datas_input_shape(task, run, tmp_path):
    case, exports = run.case, tmp_path / "exports"
    formats = ["pt2", "onnx"] if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxscript") else []
    succeeded(
        script("export", "--ckpt_path", run.last, "--output_dir", str(exports), "--formats", *(formats or ["pt2"]))
    )
    spec = json.loads((exports / "preprocessing.json").read_text())
    assert spec["input"] == {"name": "input", "shape": ["batch", *case.input_shape]}
    assert spec["output"] == {"name": "output", "shape": ["batch", case.num_classes]}
    samples = torch.randn(7, *case.input_shape)  # a batch size other than export's example's
    with torch.no_grad():
        expected = load_checkpoint(run.last).model.eval()(samples)
        exported = torch.export.load(exports / "model.pt2").module()(samples)
    torch.testing.assert_close(exported, expected)
    if "onnx" in formats:
        import onnx
        from onnx.reference import ReferenceEvaluator

        (scores,) = ReferenceEvaluator(onnx.load(exports / "model.onnx")).run(None, {"input": samples.numpy()})
        torch.testing.assert_close(torch.from_numpy(scores), expected, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module", params=list(CASES))
def two_epochs(request, tmp_path_factory) -> Run:
    """A run limited to 2 epochs, to resume; in-process."""
    case = CASES[request.param]
    folder = tmp_path_factory.mktemp(f"{request.param}_resume") / "run"
    flags = ["--data", case.data, "--batch_size", "32", "--max_epochs", "2", "--output_dir", str(folder), *QUIET]
    with own_task():
        assert train_main([*flags, *case.flags]) == 0
    return Run(case, folder, json.loads((folder / "metrics.json").read_text()))


def resume(folder: Path, *flags: str) -> int:
    return train_main(["--output_dir", str(folder), "--ckpt_path", "last", *flags])


@pytest.mark.slow
def test_resume_trains_the_run_on(task, two_epochs, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(two_epochs.folder, folder)
    assert resume(folder, "--max_epochs", "4") == 0
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["epochs"] == 4 and [row["epoch"] for row in metrics["history"]] == [0, 1, 2, 3]
    assert metrics["test/acc"] >= 0.9 and metrics["batch_size"] == 32
    assert (folder / "logs" / "version_1" / "metrics.csv").is_file()  # the resumed segment's own CSV logs
    contents = torch.load(folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert contents["datamodule_hyper_parameters"]["_class_path"] == two_epochs.case.data
    assert contents["hyper_parameters"]["num_classes"] == two_epochs.case.num_classes


@pytest.mark.slow
@pytest.mark.parametrize("change", ["argument", "class"])
def test_resume_refuses_a_changed_data_module(task, two_epochs, capsys, change):
    case, last = two_epochs.case, two_epochs.folder / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    flags = ["--data.samples", "900"] if change == "argument" else ["--data", case.other]
    assert resume(two_epochs.folder, "--max_epochs", "4", *flags) == 2
    message = one_paragraph(capsys.readouterr().err)  # the resume names the change it refuses
    assert flags[0] in message and flags[1] in message
    assert last.read_bytes() == before and not (two_epochs.folder / "logs" / "version_1").exists()


def test_a_data_module_without_sizes_is_refused_before_training(task, tmp_path, capfd):
    assert train_main(["--data", "own_data.Unsized", "--output_dir", str(tmp_path / "run"), *QUIET]) == 2
    captured = capfd.readouterr()
    message = one_paragraph(captured.err)
    assert message.startswith("Error: The data module Unsized has no input_shape or num_classes")
    assert "Classify takes input_shape, num_classes from it (its arguments without a default)" in message
    assert "GPU available" not in captured.err + captured.out  # no Lightning banner: refused before the Trainer
    assert not (tmp_path / "run").exists()


def test_a_data_module_by_class_path_gets_its_own_defaults(task):
    """`--data own_data.TinyImages` is TinyImages as its author made it: its samples default is 400, whatever the
    project's default data module (own_data.Points here, whose samples default is 600) says."""
    from mnist_lightning.core.cli import parse_args

    assert parse_args(["--data", "own_data.TinyImages"]).data.init_args.samples == CASES["images"].samples


@pytest.mark.parametrize("where", ["flag", "config file"])
@pytest.mark.parametrize(
    ("flag", "source", "reported"),
    [
        ("--net", "class Net(nn.Module)\n    pass\n", "mine.py"),
        ("--data", "class Data:\n  x = 1\n    y = 2\n", "mine.py"),
        ("--data", "rows = [1, 2][5]\nclass Data:\n    pass\n", "mine.py"),
    ],
    ids=["net-syntax", "data-indentation", "data-raises"],
)
def test_an_own_file_that_fails_to_import_is_named(task, tmp_path, monkeypatch, capsys, flag, source, where, reported):
    """A mistake in the user's own file: Python's traceback (a syntax error: the line and its caret), after a line
    naming the file whose import failed."""
    (tmp_path / "mine.py").write_text("from torch import nn\n" * (flag == "--net") + source)
    monkeypatch.syspath_prepend(str(tmp_path))
    chosen = [flag, f"mine.{'Net' if flag == '--net' else 'Data'}"]
    if where == "config file":
        (tmp_path / "mine.yaml").write_text(f"{flag[2:]}:\n  class_path: {chosen[1]}\n")
        chosen = ["--config", str(tmp_path / "mine.yaml")]
    code = train_main([*chosen, "--output_dir", str(tmp_path / "run"), *QUIET])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"Error: importing {tmp_path / 'mine.py'} of your code raised "), err
    assert "Traceback (most recent call last)" in err or "SyntaxError" in err  # a syntax error has no frame
    assert not (tmp_path / "run").exists()


def test_a_data_module_that_fails_in_its_init_shows_its_traceback(task, tmp_path, capsys):
    flags = ["--data", "own_data.Broken", "--data.broken", "__init__", "--output_dir", str(tmp_path / "run")]
    assert train_main([*flags, *QUIET]) == 1
    assert "index 5 is out of bounds" in users_traceback(capsys.readouterr().err, "Broken.__init__")
    assert not (tmp_path / "run").exists()


def test_a_network_that_does_not_fit_the_data_shows_its_traceback(task, tmp_path, capsys):
    """TinyCNN wants images; Points gives samples of shape (2,): the network's own error, where it is raised."""
    flags = ["--data", "own_data.Points", "--net", "own_data.TinyCNN", "--output_dir", str(tmp_path / "run"), *QUIET]
    assert train_main(flags) == 1
    users_traceback(capsys.readouterr().err, "TinyCNN.__init__")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_export_a_network_whose_forward_argument_has_another_name(task, tmp_path, capsys):
    """MLP.forward takes ``samples``, not ``images``: the export must not depend on the argument's name."""
    folder = tmp_path / "run"
    flags = ["--data", "own_data.Points", "--net", "own_data.MLP", "--max_epochs", "1", "--output_dir", str(folder)]
    assert train_main([*flags, "--batch_size", "32", *QUIET]) == 0
    last = str(folder / "checkpoints" / "last.ckpt")
    assert export_main(["--ckpt_path", last, "--output_dir", str(tmp_path / "exports"), "--formats", "pt2"]) == 0
    samples = torch.randn(3, 2)
    with torch.no_grad():
        expected = load_checkpoint(last).model.net.eval()(samples)
        exported = torch.export.load(tmp_path / "exports" / "model.pt2").module()(samples)
    torch.testing.assert_close(exported, expected)


def test_fine_tuning_from_a_checkpoint_of_other_data_names_the_data(task, tmp_path, capsys):
    """The same --net on other data has weights of other sizes: the refusal names the data, not the network."""
    points = tmp_path / "points"
    flags = ["--data", "own_data.Points", "--net", "own_data.MLP", "--max_epochs", "1", *QUIET]
    assert train_main([*flags, "--output_dir", str(points)]) == 0
    capsys.readouterr()
    start = ["--ckpt_path", str(points / "checkpoints" / "last.ckpt"), "--net", "own_data.MLP", *QUIET]
    assert train_main(["--data", "own_data.TinyImages", *start, "--output_dir", str(tmp_path / "run")]) == 2
    message = one_paragraph(capsys.readouterr().err)
    assert '"input_shape": [2], "num_classes": 3' in message and '"data": {' in message, message
    assert '"_class_path": "own_data.Points"' in message and '"samples": 600' in message  # the --data to pass
    assert "Pass the options and --data it was trained with" in message
    assert not (tmp_path / "run").exists()


def test_a_data_module_without_a_test_dataloader_is_refused_before_training(task, tmp_path, capfd):
    """The run tests after the fit: Lightning would find out only then."""
    assert train_main(["--data", "own_data.Untested", "--max_epochs", "1", "--output_dir", str(tmp_path / "run")]) == 2
    captured = capfd.readouterr()
    named = "Untested has no test_dataloader(): define one, or pass --limit_test_batches 0"
    assert named in one_paragraph(captured.err)
    assert "GPU available" not in captured.err + captured.out  # refused before the Trainer
    assert not (tmp_path / "run").exists()


def test_a_data_module_that_takes_no_batch_size_is_refused_before_training(task, tmp_path, capfd):
    """Every data module takes the top-level --batch_size (the run's record reads it)."""
    assert train_main(["--data", "own_data.Unbatched", "--max_epochs", "1", "--output_dir", str(tmp_path / "run")]) == 2
    captured = capfd.readouterr()
    assert "Unbatched" in one_paragraph(captured.err) and "batch_size" in captured.err
    assert "GPU available" not in captured.err + captured.out  # refused before the Trainer
    assert not (tmp_path / "run").exists()


def test_a_data_module_without_a_test_set_trains_with_limit_test_batches_0(task, tmp_path, capsys):
    flags = ["--data", "own_data.Untested", "--max_epochs", "1", "--limit_test_batches", "0"]
    assert train_main([*flags, "--output_dir", str(tmp_path / "run"), *QUIET]) == 0
    assert f"Not tested. Run folder: {tmp_path / 'run'}" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert not [name for name in metrics if name.startswith("test/")] and metrics["epochs"] == 1


@pytest.mark.parametrize(
    ("fault", "stage", "holds"),
    [
        ("wide", "train", "train_dataloader() holds samples of torch.float32 (32, 4),"),
        ("dict", "train", "train_dataloader() holds samples of a dict,"),
        ("nan", "train", "train_dataloader() holds samples of torch.float32 (32, 2),"),
        ("double", "train", "train_dataloader() holds samples of torch.float64 (32, 2),"),
        ("integer", "val", "val_dataloader() holds samples of torch.int64 (32, 2),"),
    ],
)
def test_samples_that_break_what_the_model_takes_are_named(task, tmp_path, capfd, fault, stage, holds):
    """Classify takes what its example_input_array is: float32 samples of Points' input_shape (2,); Mislabelled's
    first batch of its `stage` loader breaks that."""
    flags = ["--data", "own_data.Mislabelled", "--data.fault", fault, "--data.stage", stage, "--max_epochs", "1"]
    assert train_main([*flags, "--batch_size", "32", "--output_dir", str(tmp_path / "run"), *QUIET]) == 2
    message = one_paragraph(capfd.readouterr().err)
    assert f"The first batch of Mislabelled.{holds}" in message
    assert "not the finite torch.float32 samples of shape (2,) that Classify takes (its example_input_array)" in message
    assert not (tmp_path / "run").exists()  # found before the first checkpoint: the new run leaves no folder


@pytest.mark.parametrize(
    ("fault", "stage", "step"),
    [
        ("float", "train", "training_step"),
        ("unlabelled", "train", "training_step"),  # NaN labels
        ("high", "train", "training_step"),
        ("negative", "val", "validation_step"),
        ("late", "val", "validation_step"),  # past the first batch
        ("late", "test", "test_step"),
    ],
)
def test_labels_the_task_cannot_take_fail_in_its_step_with_its_traceback(task, tmp_path, capfd, fault, stage, step):
    """What labels must be is the LightningModule's: this task checks none (the example's Classifier checks each
    stage's first batch; test_lightning_module.py), so torch refuses them in its step, shown with its traceback."""
    flags = ["--data", "own_data.Mislabelled", "--data.fault", fault, "--data.stage", stage, "--max_epochs", "1"]
    assert train_main([*flags, "--batch_size", "32", "--output_dir", str(tmp_path / "run"), *QUIET]) == 1
    users_traceback(capfd.readouterr().err, rf"\w+\.{step}", file="tasks.py")


# Run as a user runs them, each in its own process: Lightning 2.6 leaves DataLoader's __init__ patched after an
# error inside a *_dataloader() (its _replace_dunder_methods has no finally), which would reach the later tests here.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "reason"),
    [
        ("train_dataloader", "sampler option is mutually exclusive with shuffle"),
        ("val_dataloader", "sampler option is mutually exclusive with shuffle"),
        ("prepare_data", "No such file or directory: '/proc/no/such/folder/points.npz'"),
    ],
)
def test_a_data_module_method_that_fails_shows_its_traceback(task, tmp_path, method, reason):
    """The user's own DataLoader raises (torch refuses shuffle with a sampler) while Lightning sets up the fit."""
    flags = ["--data", "own_data.Broken", "--data.broken", method, "--max_epochs", "1"]
    result = script("train", *flags, "--output_dir", str(tmp_path / "run"), *QUIET)
    assert result.returncode == 1, result.stderr
    assert reason in users_traceback(result.stderr, f"Broken.{method}")
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    """A run of own_data.Broken with nothing broken yet: its last.ckpt, for evaluate and predict to break."""
    folder = tmp_path_factory.mktemp("broken") / "run"
    with own_task():
        assert train_main(["--data", "own_data.Broken", "--max_epochs", "1", "--output_dir", str(folder), *QUIET]) == 0
    return folder / "checkpoints" / "last.ckpt"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entry", "method", "code", "said"),
    [
        ("evaluate", "test_dataloader", 1, "Error: Broken.test_dataloader() of your code raised"),
        ("predict", "predict_dataloader", 1, "Error: Broken.predict_dataloader() of your code raised"),
        ("predict", "predict_samples", 2, "Broken.predict_dataloader() holds samples of torch.float32 (6, 5)"),
    ],
)
def test_evaluate_and_predict_name_a_data_module_that_fails(task, broken, tmp_path, entry, method, code, said):
    flags = ["--ckpt_path", str(broken), "--data.broken", method]
    output = ["--output_dir", str(tmp_path / "out")] if entry == "evaluate" else ["--output", str(tmp_path / "out.csv")]
    result = script(entry, *flags, *output)
    assert result.returncode == code and said in one_line(result.stderr), result.stderr
    assert not os.listdir(tmp_path)  # evaluate's new folder is removed, as a failed train's is


def test_a_bad_test_batch_found_after_training_says_how_to_test_the_kept_run(task, tmp_path, capfd, monkeypatch):
    """The test set is read only after the fit: the trained epochs stay, and the printed resume tests them once the
    data module is fixed. evaluate.py checks the same batch."""
    run = tmp_path / "run"
    flags = ["--data", "own_data.Mislabelled", "--data.fault", "wide", "--data.stage", "test", "--batch_size", "32"]
    assert train_main([*flags, "--output_dir", str(run), *QUIET]) == 2
    message = after_banners(capfd.readouterr().err)
    assert "test_dataloader() holds samples of torch.float32 (32, 4)" in message
    assert f"The fit is complete and kept in {run}. Once this is mended, test it by resuming" in message
    assert f"--output_dir {run.resolve()} --ckpt_path last" in message
    last = str(run / "checkpoints" / "last.ckpt")
    assert evaluate_main(["--ckpt_path", last, "--output_dir", str(tmp_path / "e")]) == 2
    assert "test_dataloader() holds samples of torch.float32 (32, 4)" in one_paragraph(capfd.readouterr().err)
    assert not (tmp_path / "e").exists()
    import own_data

    fixed = own_data.Points.test_dataloader  # the user's fix: the test set as it should be
    monkeypatch.setattr(own_data.Mislabelled, "test_dataloader", lambda self: fixed(own_data.Points(self.batch_size)))
    assert train_main(["--output_dir", str(run), "--ckpt_path", "last", *QUIET]) == 0
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None


@pytest.mark.parametrize(
    ("empty", "said"),
    [
        ("train", ".train_dataloader() gave no batch: give it samples"),
        ("val", ".val_dataloader() gave no batch: give it samples"),
        ("test", ".test_dataloader() gave no batch: give it samples"),
    ],
)
def test_an_empty_set_is_named_not_warned_of(task, tmp_path, capfd, empty, said):
    """Lightning only warns of an empty DataLoader (and a run would report nothing, or a best checkpoint never
    chosen); the run says which set of the data module is empty."""
    flags = ["--data", "own_data.Empty", "--data.empty", empty, "--max_epochs", "1", "--batch_size", "32"]
    assert train_main([*flags, "--output_dir", str(tmp_path / "run"), *QUIET]) == 2
    captured = capfd.readouterr()
    message = after_banners(captured.err)
    assert f"Empty{said}" in message
    assert "Warning" not in captured.err + captured.out and not (tmp_path / "run" / "metrics.json").exists()
    if empty == "test":  # found after training: the trained run is kept
        assert f"The fit is complete and kept in {tmp_path / 'run'}" in message
        last = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
        assert evaluate_main(["--ckpt_path", last, "--output_dir", str(tmp_path / "e")]) == 2
        err = capfd.readouterr().err
        assert said in err.replace("\n", " ") and "Warning" not in err
    else:
        assert not (tmp_path / "run").exists()


def test_a_data_module_without_validation_trains_and_tests_its_last_weights(task, tmp_path, capfd, monkeypatch):
    import own_data

    monkeypatch.setattr(own_data.TrainOnly, "val_dataloader", LightningDataModule.val_dataloader)  # Lightning's own
    flags = ["--data", "own_data.TrainOnly", "--batch_size", "32", "--max_epochs", "1"]
    with warnings.catch_warnings(record=True) as shown:  # what a user's terminal would show (pytest keeps them)
        warnings.simplefilter("always")
        assert train_main([*flags, "--output_dir", str(tmp_path / "run"), *QUIET]) == 0
    assert not [str(warning.message) for warning in shown if "val" in str(warning.message)], shown
    captured = capfd.readouterr()
    assert "could not find the monitored key" not in captured.err and "Warning" not in captured.err
    assert "Tested the last of 1 epoch: test/loss " in captured.out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["best_val/acc"] is None and metrics["test/acc"] is not None


def test_predict_prepares_the_data_of_a_data_module_that_makes_its_files(task, tmp_path):
    """predict.py without inputs on a fresh data_file, as evaluate.py: the data module's prepare_data makes it."""
    run, fresh, output = tmp_path / "run", tmp_path / "fresh.pt", tmp_path / "predictions.csv"
    flags = ["--data", "own_data.Generated", "--data.data_file", str(tmp_path / "points.pt"), "--max_epochs", "1"]
    assert train_main([*flags, "--output_dir", str(run), *QUIET]) == 0
    last = str(run / "checkpoints" / "last.ckpt")
    assert predict_main(["--ckpt_path", last, "--data.data_file", str(fresh), "--output", str(output)]) == 0
    assert fresh.is_file() and len(read_csv(output)[1]) == 60
