"""predict.py on the tests' own tasks (conftest.py's ``task``): Lightning's predict loop over the data module's predict
set, or over files its ``read_file`` reads; a CSV row per sample with the columns the LightningModule's
``predict_step`` returns, on stdout or in the output file, whole or not at all. And export replaces its own earlier
files whole."""

import contextlib
import csv
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import QUICK, command_environment, one_line, own_task

from mnist_lightning.core import export
from mnist_lightning.core.predict import main
from mnist_lightning.core.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
PREDICT_ROWS = 60  # own_data.Points' predict set: the first tenth of its 600 samples


def trained_checkpoint(run: Path, *flags: str) -> str:
    assert train_main(["--output_dir", str(run), *QUICK, *flags]) == 0
    return json.loads((run / "metrics.json").read_text())["best_checkpoint"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> str:
    """The best checkpoint of tasks.Classify trained on own_data.Points."""
    with own_task():
        return trained_checkpoint(tmp_path_factory.mktemp("trained") / "run")


def read_csv(text: str) -> tuple[list[str], list[dict]]:
    reader = csv.DictReader(text.splitlines())
    return list(reader.fieldnames or []), list(reader)


def predict(ckpt: str, *inputs, tmp_path: Path, flags=()) -> list[dict]:
    """predict.py's rows for ``inputs``, read back from its CSV output."""
    output = tmp_path / "predictions.csv"
    assert main(["--ckpt_path", ckpt, *map(str, inputs), "--output", str(output), *flags]) == 0
    return read_csv(output.read_text())[1]


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ("folder.csv", "Is a directory"),
        ("/proc/out.csv", "No such file or directory"),  # /proc takes no new file, even from root
        ("a_file/out.csv", "File exists"),  # a file where its folder would be
    ],
)
def test_an_output_that_cannot_be_written_is_one_paragraph_and_leaves_nothing(
    task, ckpt, tmp_path, capsys, output, reason
):
    """No pre-check of --output: the write fails with the OS's reason, and no file is left half-written."""
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "a_file").write_text("")
    path = tmp_path / output
    assert main(["--ckpt_path", ckpt, "--output", str(path)]) == 1
    err = one_line(capsys.readouterr().err)
    assert err == f"Error: {path} could not be written: {reason}.", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "folder.csv"] and not any(tmp_path.glob("*/*"))


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["x.png", "--batch_size", "-1"], '"batch_size"'),
        (["x.png", "--batch_size", "1e30"], '"batch_size"'),
        (["x.png", "--ckpt_path"], "--ckpt_path"),
        (["--limit_predict_batches", "few"], "limit_predict_batches"),
    ],
)
def test_bad_options_are_one_paragraph_without_usage(task, ckpt, capsys, flags, phrase):
    assert main(["--ckpt_path", ckpt, *flags]) == 2
    err = capsys.readouterr().err
    assert phrase in one_line(err) and "usage:" not in err and err.startswith("Error:")


@pytest.mark.parametrize("name", ["predictions.txt", "predictions.json"])
def test_any_output_name_gets_csv_replaced_whole(task, ckpt, tmp_path, name):
    """Every output is CSV, whatever its name (JSON output was dropped), replaced whole by the next predict."""
    output = tmp_path / name
    for _ in range(2):
        assert main(["--ckpt_path", ckpt, "--output", str(output)]) == 0
    lines = output.read_text().splitlines()
    assert lines[0] == "input,prediction,confidence" and len(lines) == PREDICT_ROWS + 1


def test_the_rows_go_to_stdout_or_whole_to_the_output_file(task, ckpt, capsys, tmp_path):
    assert main(["--ckpt_path", ckpt]) == 0
    printed = capsys.readouterr().out
    output = tmp_path / "all.csv"
    assert main(["--ckpt_path", ckpt, "--output", str(output)]) == 0
    assert capsys.readouterr().out == f"Wrote {PREDICT_ROWS} rows to {output}\n"  # and nothing else
    assert output.read_text() == printed
    columns, rows = read_csv(printed)
    assert columns == ["input", "prediction", "confidence"] and len(rows) == PREDICT_ROWS


def test_without_inputs_the_data_modules_predict_set_is_predicted(task, ckpt, tmp_path):
    # own_data.Points' predict set is the first points of its test set, in order.
    rows = predict(ckpt, tmp_path=tmp_path)
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(PREDICT_ROWS)]
    # The probability of the class predicted, the largest of three: at least 1/3.
    assert all(1 / 3 - 1e-6 <= float(row["confidence"]) <= 1 for row in rows)
    import own_data

    labels = own_data.Points().sets["test"].tensors[1][:PREDICT_ROWS].tolist()
    right = sum(int(row["prediction"]) == label for row, label in zip(rows, labels, strict=True))
    assert right >= 0.9 * PREDICT_ROWS  # the trained model's classes, not noise


# with_digit_photos:
def test_a_file_of_the_predict_sets_samples_gets_the_same_predictions(task, tmp_path):
    """Read by the data module's read_file (own_data.PointFiles: a CSV of points), the same samples as its predict
    set give the same rows, named by the file."""
    import own_data

    checkpoint = trained_checkpoint(tmp_path / "run", "--data", "own_data.PointFiles")
    points = own_data.Points().sets["predict"].tensors[0]
    path = tmp_path / "points.csv"
    path.write_text("".join(f"{x!r},{y!r}\n" for x, y in points.tolist()))
    from_set = predict(checkpoint, tmp_path=tmp_path)
    from_file = predict(checkpoint, path, tmp_path=tmp_path)
    assert [row["input"] for row in from_file] == [f"{path}[{i}]" for i in range(PREDICT_ROWS)]
    assert [row["prediction"] for row in from_file] == [row["prediction"] for row in from_set]
    for row, same in zip(from_file, from_set, strict=True):
        assert float(row["confidence"]) == pytest.approx(float(same["confidence"]), abs=1e-6)


def test_help_says_the_inputs_are_optional(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    positional = capsys.readouterr().out.split("positional arguments:")[1].split("options:")[0]
    assert "inputs" in positional and "none: its predict_dataloader" in one_line(positional)


# end with_digit_photos
@pytest.mark.parametrize(
    ("model", "data", "columns"),
    [
        ("tasks.Classify", "own_data.Points", ["input", "prediction", "confidence"]),
        ("tasks.Regress", "tasks.Curve", ["input", "value"]),
        ("tasks.Tag", "tasks.Tagged", ["input", "labels"]),
    ],
)
def test_the_columns_are_what_predict_step_returns(task, tmp_path, capsys, model, data, columns):
    """A column per key of the dict that the LightningModule's predict_step returns, whatever the task."""
    task(model, data)
    checkpoint = trained_checkpoint(tmp_path / "run")
    capsys.readouterr()
    assert main(["--ckpt_path", checkpoint]) == 0
    header, rows = read_csv(capsys.readouterr().out)
    assert header == columns and len(rows) == PREDICT_ROWS
    if model == "tasks.Regress":
        assert all(math.isfinite(float(row["value"])) for row in rows)  # a number each
    if model == "tasks.Tag":
        assert all(set(json.loads(row["labels"])) <= {0, 1, 2} for row in rows)  # the labels that are on


def test_a_predict_step_that_returns_a_tensor_is_the_column_prediction(task, ckpt, monkeypatch, capsys):
    import tasks

    monkeypatch.setattr(tasks.Classify, "predict_step", lambda self, batch, batch_idx: self(batch[0]).argmax(-1))
    assert main(["--ckpt_path", ckpt]) == 0
    header, rows = read_csv(capsys.readouterr().out)
    assert header == ["input", "prediction"] and {row["prediction"] for row in rows} <= {"0", "1", "2"}


def test_limit_predict_batches_predicts_that_many(task, ckpt, capsys):
    assert main(["--ckpt_path", ckpt, "--batch_size", "7", "--limit_predict_batches", "2"]) == 0
    _, rows = read_csv(capsys.readouterr().out)
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(14)]


def test_an_export_says_each_file_it_wrote(task, ckpt, tmp_path, capsys):
    flags = ["--ckpt_path", ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2"]
    for _ in range(2):  # a second export replaces the first, and says the same
        assert export.main(flags) == 0
        written = capsys.readouterr().out.splitlines()
        assert written == [f"Wrote {tmp_path / 'export' / name}" for name in ("preprocessing.json", "model.pt2")]
    # The LightningModule's forward on inputs like its example_input_array, any batch size: a server's contract.
    spec = json.loads((tmp_path / "export" / "preprocessing.json").read_text())
    assert spec == {
        "input": {"name": "input", "shape": ["batch", 2]},
        "output": {"name": "output", "shape": ["batch", 3]},
    }
    program = torch.export.load(tmp_path / "export" / "model.pt2").module()
    assert program(torch.zeros(5, 2)).shape == (5, 3)


@pytest.mark.slow
def test_onnx_without_the_onnx_extra_is_pythons_message_and_writes_nothing(task, ckpt, tmp_path):
    """export.py writes model.pt2 unless asked for ONNX, which needs the onnx extra: without it, Python's message."""
    code = (
        "import runpy, sys; sys.modules['onnxscript'] = None; sys.argv[0] = 'tests/command.py'; "
        "runpy.run_path('tests/command.py', run_name='__main__')"
    )
    flags = ["--ckpt_path", ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2", "onnx"]
    command = [sys.executable, "-c", code, "export", *flags]
    ended = subprocess.run(command, cwd=ROOT, env=command_environment(), capture_output=True, text=True)
    assert ended.returncode == 2 and ended.stderr == "Error: import of onnxscript halted; None in sys.modules\n"
    assert not (tmp_path / "export").exists()


def stop_with(signum: int):
    """A stand-in for a step of the command that sends ``signum`` to this very process, as kill or Ctrl-C would."""

    def stopped(*args, **kwargs):
        os.kill(os.getpid(), signum)

    return stopped


STOPS = [(signal.SIGINT, 130, "Interrupted."), (signal.SIGTERM, 143, "Stopped by SIGTERM.")]


@pytest.mark.parametrize(("signum", "status", "said"), STOPS)
def test_an_export_stopped_midway_leaves_the_earlier_export_whole(
    task, ckpt, tmp_path, monkeypatch, capsys, signum, status, said
):
    """Ctrl-C or SIGTERM while exporting: the folder keeps the earlier export as it was, no half file, no mix."""
    flags = ["--ckpt_path", ckpt, "--output_dir", str(tmp_path / "exports"), "--formats", "pt2"]
    assert export.main(flags) == 0
    files = {path.name: path.read_bytes() for path in (tmp_path / "exports").iterdir() if path.name[0] != "."}
    capsys.readouterr()
    real_replaced, entered = export.replaced, []

    @contextlib.contextmanager
    def stopped_at_the_second_file(path):  # model.pt2 written in full, not yet moved in
        entered.append(path)
        if len(entered) == 2:
            os.kill(os.getpid(), signum)
        with real_replaced(path) as file:
            yield file

    monkeypatch.setattr(export, "replaced", stopped_at_the_second_file)
    assert export.main(flags) == status
    assert capsys.readouterr().err.strip() == said
    left = sorted((tmp_path / "exports").iterdir())
    assert {path.name: path.read_bytes() for path in left if path.name[0] != "."} == files
    assert [path.name for path in left if path.name[0] == "."] == [".lock"]  # no staging folder left behind


@pytest.mark.parametrize(("signum", "status", "said"), STOPS)
@pytest.mark.parametrize("step", ["load_checkpoint", "replaced"])
def test_a_stopped_export_into_a_new_folder_leaves_no_file(
    task, ckpt, tmp_path, monkeypatch, capsys, signum, status, said, step
):
    """`timeout -s TERM ... export.py --output_dir X` (or Ctrl-C): no file in X (only the lock of a folder it made)."""
    monkeypatch.setattr(export, step, stop_with(signum))
    flags = ["--ckpt_path", ckpt, "--output_dir", str(tmp_path / "new" / "exports"), "--formats", "pt2"]
    assert export.main(flags) == status
    assert capsys.readouterr().err.strip() == said
    assert [path.name for path in tmp_path.rglob("*") if path.is_file()] in ([], [".lock"])


@pytest.mark.parametrize(("signum", "status", "said"), STOPS)
def test_predict_stopped_just_after_writing_its_file_leaves_it_whole(
    task, ckpt, tmp_path, monkeypatch, capsys, signum, status, said
):
    """Ctrl-C or SIGTERM as predict.py has just replaced its CSV: one line, and the file is complete."""
    from mnist_lightning.core import predict as predict_module

    real_replaced = predict_module.replaced

    @contextlib.contextmanager
    def replaced_then_stopped(path):
        with real_replaced(path) as file:
            yield file
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(predict_module, "replaced", replaced_then_stopped)
    output = tmp_path / "predictions.csv"
    assert main(["--ckpt_path", ckpt, "--output", str(output)]) == status
    assert capsys.readouterr().err.strip() == said
    assert len(output.read_text().splitlines()) == 1 + PREDICT_ROWS


@pytest.mark.parametrize(("signum", "status", "said"), STOPS)
def test_predict_stopped_while_predicting_leaves_the_earlier_output_as_it_was(
    task, ckpt, tmp_path, monkeypatch, capsys, signum, status, said
):
    """Stopped midway through its rows (streamed into a hidden file): --output keeps the earlier predict's rows."""
    import tasks

    output = tmp_path / "predictions.csv"
    assert main(["--ckpt_path", ckpt, "--output", str(output), "--batch_size", "7"]) == 0
    earlier = output.read_text()
    real_step = tasks.Classify.predict_step

    def stopped_at_the_third_batch(self, batch, batch_idx):
        if batch_idx == 2:
            os.kill(os.getpid(), signum)
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(tasks.Classify, "predict_step", stopped_at_the_third_batch)
    capsys.readouterr()
    assert main(["--ckpt_path", ckpt, "--output", str(output), "--batch_size", "7"]) == status
    assert capsys.readouterr().err.strip() == said
    assert output.read_text() == earlier and sorted(p.name for p in tmp_path.iterdir()) == ["predictions.csv"]


def test_what_a_predict_killed_while_writing_left_is_not_taken_for_its_output(task, ckpt, tmp_path):
    """`kill -9` during the write leaves only its hidden temporary file: the next predict.py writes --output whole."""
    output = tmp_path / "predictions.csv"
    killed = "import os, sys; open(sys.argv[1] % os.getpid(), 'w').write('input,pr'); os.kill(os.getpid(), 9)"
    subprocess.run([sys.executable, "-c", killed, str(tmp_path / ".predictions.csv.%d.partial")])
    assert len(list(tmp_path.glob(".*.partial"))) == 1
    assert not output.exists()
    assert main(["--ckpt_path", ckpt, "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 1 + PREDICT_ROWS


def test_predict_takes_the_data_modules_arguments_like_evaluate(task, tmp_path, monkeypatch, capsys):
    """A run trained with a relative data file is predicted from another folder: --data.data_file says where."""
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    checkpoint = trained_checkpoint(Path("run"), "--data", "own_data.Generated", "--data.data_file", "points.pt")
    assert Path("points.pt").is_file()  # made by the data module's prepare_data
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    flags = ["--data.data_file", str(tmp_path / "project" / "points.pt"), "--batch_size", "7"]
    rows = predict(str(tmp_path / "project" / checkpoint), tmp_path=tmp_path, flags=flags)
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(PREDICT_ROWS)]
    assert not list(Path().iterdir())  # read where it was said to be, not made again here
