"""predict.py on IDX files and on the data module's own predict set: the rows on stdout or in the output file, and
its mistakes told before any work; export replaces its own earlier files.
"""

import contextlib
import json
import os
import shutil
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
    ("output", "phrase"),
    [
        ("out.txt", "give a .csv or .json file of its own"),
        ("folder.csv", "give a .csv or .json file of its own"),
        ("afile/out.csv", "not a directory"),
        ("/proc/out.csv", "/proc/out.csv cannot be written"),  # /proc takes no new file, even from root
    ],
)
def test_output_is_checked_before_any_work(tmp_path, capsys, output, phrase):
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "afile").write_text("")
    # No checkpoint, no inputs: the --output mistake is reported first, before any of them is looked at.
    code = main(["--ckpt_path", str(tmp_path / "none.ckpt"), "missing.png", "--output", str(tmp_path / output)])
    err = one_line(capsys.readouterr().err)
    assert code == 2 and phrase in err and "--output" in err and "none.ckpt" not in err


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


def test_predictions_do_not_replace_what_a_run_wrote(fake_ckpt, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(Path(fake_ckpt).parents[1], run)
    ckpt = str(run / "checkpoints" / Path(fake_ckpt).name)
    for written in ("metrics.json", "logs/metrics.csv"):
        before = (run / written).read_bytes()
        assert main(["--ckpt_path", ckpt, "--output", str(run / written)]) == 2
        assert f"--output {run / written}: give a .csv or .json file of its own" in one_line(capsys.readouterr().err)
        assert (run / written).read_bytes() == before
    for _ in range(2):  # a file of their own in the run's folder, replaced by the next predict
        assert main(["--ckpt_path", ckpt, "--output", str(run / "predictions.csv")]) == 0


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


def test_a_second_export_says_what_it_replaced(fake_ckpt, tmp_path, capsys):
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "export"), "--formats", "pt2"]
    assert export.main(flags) == 0 and "replaced" not in capsys.readouterr().out
    assert export.main(flags) == 0
    assert "model.pt2 (replaced the earlier one)" in capsys.readouterr().out


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
    """`timeout -s TERM ... export.py --output_dir X` (or Ctrl-C): no X, nor the folders made for it."""
    monkeypatch.setattr(export, step, stop_with(signum))
    flags = ["--ckpt_path", fake_ckpt, "--output_dir", str(tmp_path / "new" / "exports"), "--formats", "pt2"]
    assert export.main(flags) == status
    assert capsys.readouterr().err.strip() == said
    assert not any(tmp_path.iterdir())


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
