"""predict.py on IDX files and on the data module's own predict set: the rows on stdout or in the output file, whole
or not at all; export replaces its own earlier files.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAKE_TEST, TINY_RUN, one_line, write_fake_mnist

from mnist_lightning.core import export
from mnist_lightning.core.predict import main
from mnist_lightning.core.train import main as train_main


def trained_checkpoint(data_dir: Path, run: Path, *flags: str) -> str:
    assert train_main(["--data.data_dir", str(data_dir), "--output_dir", str(run), *flags]) == 0
    return json.loads((run / "metrics.json").read_text())["best_checkpoint"]


@pytest.fixture(scope="module")
def fake_ckpt(fake_mnist, tmp_path_factory) -> str:
    return trained_checkpoint(fake_mnist, tmp_path_factory.mktemp("fake") / "run", *TINY_RUN)


def predict(ckpt: str, *inputs, tmp_path: Path, flags=()) -> list[dict]:
    """predict.py's rows for ``inputs``, read back from its JSON output."""
    output = tmp_path / "predictions.json"
    assert main(["--ckpt_path", ckpt, *map(str, inputs), "--output", str(output), *flags]) == 0
    return json.loads(output.read_text())["predictions"]


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ("folder.csv", "Is a directory"),
        ("/proc/out.csv", "No such file or directory"),  # /proc takes no new file, even from root
        ("a_file/out.csv", "File exists"),  # a file where its folder would be
    ],
)
def test_an_output_that_cannot_be_written_is_one_paragraph_and_leaves_nothing(
    fake_ckpt, tmp_path, capsys, output, reason
):
    """No pre-check of --output: the write fails with the OS's reason, and no file is left half-written."""
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "a_file").write_text("")
    path = tmp_path / output
    assert main(["--ckpt_path", fake_ckpt, "--output", str(path)]) == 1
    err = one_line(capsys.readouterr().err)
    assert err == f"Error: {path} could not be written: {reason}.", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "folder.csv"] and not any(tmp_path.glob("*/*"))


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["x.png", "--batch_size", "-1"], '"batch_size"'),
        (["x.png", "--batch_size", "1e30"], '"batch_size"'),
        (["x.png", "--ckpt_path"], "--ckpt_path"),
    ],
)
def test_bad_options_are_one_paragraph_without_usage(fake_ckpt, capsys, flags, phrase):
    assert main(["--ckpt_path", fake_ckpt, *flags]) == 2
    err = capsys.readouterr().err
    assert phrase in one_line(err) and "usage:" not in err and err.startswith("Error:")


def test_an_output_name_not_ending_in_json_gets_csv(fake_ckpt, tmp_path, capsys):
    """Any name but *.json gets CSV, replaced whole by the next predict."""
    output = tmp_path / "predictions.txt"
    for _ in range(2):
        assert main(["--ckpt_path", fake_ckpt, "--output", str(output)]) == 0
    lines = output.read_text().splitlines()
    assert lines[0] == "input,status,prediction,confidence,note" and len(lines) == FAKE_TEST + 1


def test_the_rows_go_to_stdout_or_whole_to_the_output_file(fake_ckpt, capsys, tmp_path):
    assert main(["--ckpt_path", fake_ckpt]) == 0
    printed = capsys.readouterr().out
    output = tmp_path / "all.csv"
    assert main(["--ckpt_path", fake_ckpt, "--output", str(output)]) == 0
    assert capsys.readouterr().out == f"Wrote {FAKE_TEST} rows to {output}\n"  # and nothing else
    assert output.read_text() == printed
    written = printed.strip().splitlines()
    assert len(written) == FAKE_TEST + 1
    assert written[0].split(",") == ["input", "status", "prediction", "confidence", "note"]
    assert all(line.split(",")[1] == "ok" for line in written[1:])


def test_without_inputs_the_data_modules_predict_set_is_predicted(fake_ckpt, fake_mnist, tmp_path):
    # MNISTDataModule's predict_dataloader is its test set: the t10k file, in order.
    rows = predict(fake_ckpt, tmp_path=tmp_path)
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(FAKE_TEST)]
    # with_digit_photos:
    same_file = predict(fake_ckpt, fake_mnist / "MNIST" / "raw" / "t10k-images-idx3-ubyte", tmp_path=tmp_path)
    assert [row["prediction"] for row in rows] == [row["prediction"] for row in same_file]
    for row, same in zip(rows, same_file, strict=True):
        assert row["confidence"] == pytest.approx(same["confidence"], abs=1e-6)
    # end with_digit_photos
    # The probability of the class predicted, the largest of ten: at least 1/10.
    assert all(row["status"] == "ok" and 0.1 - 1e-6 <= row["confidence"] <= 1 for row in rows)


def test_an_export_says_each_file_it_wrote(fake_ckpt, tmp_path, capsys):
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2"]
    for _ in range(2):  # a second export replaces the first, and says the same
        assert export.main(flags) == 0
        written = capsys.readouterr().out.splitlines()
        assert written == [f"Wrote {tmp_path / 'export' / name}" for name in ("preprocessing.json", "model.pt2")]
    # A server needs the data module's normalization to make the model's inputs from pixels.
    spec = json.loads((tmp_path / "export" / "preprocessing.json").read_text())
    assert spec["normalize"] == {"mean": 0.1307, "std": 0.3081, "formula": "(uint8 / 255 - mean) / std"}


@pytest.mark.slow
def test_onnx_without_the_onnx_extra_is_pythons_message_and_writes_nothing(fake_ckpt, tmp_path):
    """export.py writes model.pt2 unless asked for ONNX, which needs the onnx extra: without it, Python's message."""
    code = "import sys; sys.modules['onnxscript'] = None; import mnist_lightning.core.export as e; sys.exit(e.main())"
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2", "onnx"]
    ended = subprocess.run([sys.executable, "-c", code, *flags], capture_output=True, text=True)
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
    fake_ckpt, tmp_path, monkeypatch, capsys, signum, status, said
):
    """Ctrl-C or SIGTERM while exporting: the folder keeps the earlier export as it was, no half file, no mix."""
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "exports"), "--formats", "pt2"]
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
    fake_ckpt, tmp_path, monkeypatch, capsys, signum, status, said, step
):
    """`timeout -s TERM ... export.py --output_dir X` (or Ctrl-C): no file in X (only the lock of a folder it made)."""
    monkeypatch.setattr(export, step, stop_with(signum))
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "new" / "exports"), "--formats", "pt2"]
    assert export.main(flags) == status
    assert capsys.readouterr().err.strip() == said
    assert [path.name for path in tmp_path.rglob("*") if path.is_file()] in ([], [".lock"])


@pytest.mark.parametrize(("signum", "status", "said"), STOPS)
def test_predict_stopped_just_after_writing_its_file_leaves_it_whole(
    fake_ckpt, tmp_path, monkeypatch, capsys, signum, status, said
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
    assert main(["--ckpt_path", fake_ckpt, "--output", str(output)]) == status
    assert capsys.readouterr().err.strip() == said
    assert len(output.read_text().splitlines()) == 1 + FAKE_TEST


def test_what_a_predict_killed_while_writing_left_is_not_taken_for_its_output(fake_ckpt, tmp_path):
    """`kill -9` during the write leaves only its hidden temporary file: the next predict.py writes --output whole."""
    output = tmp_path / "predictions.csv"
    killed = "import os, sys; open(sys.argv[1] % os.getpid(), 'w').write('input,st'); os.kill(os.getpid(), 9)"
    subprocess.run([sys.executable, "-c", killed, str(tmp_path / ".predictions.csv.%d.partial")])
    assert len(list(tmp_path.glob(".*.partial"))) == 1
    assert not output.exists()
    assert main(["--ckpt_path", fake_ckpt, "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 1 + FAKE_TEST


def test_predict_takes_the_data_modules_arguments_like_evaluate(tmp_path, monkeypatch, capsys):
    """A run trained with a relative data_dir is predicted from another folder: --data.data_dir says where."""
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    write_fake_mnist(tmp_path / "project" / "data")
    checkpoint = trained_checkpoint(Path("data"), Path("run"), *TINY_RUN)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    flags = ["--data.data_dir", str(tmp_path / "project" / "data"), "--batch_size", "7"]
    rows = predict(str(tmp_path / "project" / checkpoint), tmp_path=tmp_path, flags=flags)
    assert [row["input"] for row in rows] == [f"predict_dataloader[{i}]" for i in range(FAKE_TEST)]


def test_help_says_the_inputs_are_optional(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    positional = capsys.readouterr().out.split("positional arguments:")[1].split("options:")[0]
    assert "inputs" in positional and "none: its predict_dataloader" in one_line(positional)
