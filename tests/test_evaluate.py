"""evaluate.py: a checkpoint tested again, anywhere, with the same result as at the end of training, on the tests' own
tasks (conftest.py's ``task``): whatever the LightningModule logs in its test is what evaluate.py reports."""

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import QUICK, one_line, own_task

from mnist_lightning.core.evaluate import main
from mnist_lightning.core.predict import main as predict_main
from mnist_lightning.core.train import main as train_main


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A finished run of tasks.Classify on own_data.Points; its metrics.json."""
    run = tmp_path_factory.mktemp("trained") / "run"
    with own_task():
        assert train_main(["--output_dir", str(run), *QUICK]) == 0
    return json.loads((run / "metrics.json").read_text())


def test_evaluate_reproduces_the_test_metrics_of_training(task, trained, tmp_path, capfd):
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    captured = capfd.readouterr()
    assert "available" not in captured.err  # its line, not the banners
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    scores = f"test/loss {trained['test/loss']:.4f}, test/acc {trained['test/acc']:.4f}"
    assert captured.out == f"Tested: {scores}. Run folder: {tmp_path / 'e'}\n"
    assert written["test/acc"] == trained["test/acc"] and written["test/loss"] == pytest.approx(trained["test/loss"])
    assert trained.keys() - {"history"} <= written.keys() | {"fit_seconds", "seed", "best_val/acc"}
    assert written["best_checkpoint"] == trained["best_checkpoint"]  # the checkpoint tested
    record = yaml.safe_load((tmp_path / "e" / "config.yaml").read_text())
    assert record["ckpt_path"] == trained["best_checkpoint"] and record["output_dir"] == str(tmp_path / "e")


@pytest.mark.parametrize(
    ("model", "data", "logged"),
    [("tasks.Regress", "tasks.Curve", {"test/loss"}), ("tasks.Tag", "tasks.Tagged", {"test/loss", "test/f1"})],
)
def test_evaluate_reports_what_any_task_logs(task, tmp_path, capsys, model, data, logged):
    """No metric is the machinery's: a regression's loss, a multi-label task's F1, as their test logged them."""
    task(model, data)
    run = tmp_path / "run"
    assert train_main(["--output_dir", str(run), *QUICK]) == 0
    trained = json.loads((run / "metrics.json").read_text())
    capsys.readouterr()
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert {name for name in written if name.startswith("test/")} == logged
    assert all(written[name] == pytest.approx(trained[name]) for name in logged)
    assert out.startswith("Tested: ") and all(f"{name} {trained[name]:.4f}" in out for name in logged)
    assert "acc" not in out and "accuracy" not in json.dumps(written)


def test_limit_test_batches_tests_that_many(task, trained, tmp_path):
    """evaluate.py --limit_test_batches 1 --batch_size 10: the accuracy of ten samples."""
    flags = ["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]
    assert main([*flags, "--limit_test_batches", "1", "--batch_size", "10"]) == 0
    accuracy = json.loads((tmp_path / "e" / "metrics.json").read_text())["test/acc"]
    assert 10 * accuracy == pytest.approx(round(10 * accuracy))  # a tenth of a whole number of right answers


def test_an_evaluation_folder_is_not_taken_for_a_training_run(task, trained, tmp_path, capsys):
    """Its config.yaml is evaluate.py's: train.py --ckpt_path last says there is no training run there."""
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    capsys.readouterr()
    assert train_main(["--output_dir", str(tmp_path / "e"), "--ckpt_path", "last"]) == 2
    message = one_line(capsys.readouterr().err)
    assert f"{tmp_path / 'e'} holds no run to resume" in message
    assert sorted(path.name for path in (tmp_path / "e").iterdir()) == [".lock", "config.yaml", "metrics.json"]


def test_evaluate_on_other_settings(task, trained, tmp_path):
    flags = ["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e"), "--batch_size", "7"]
    assert main([*flags, "--data.spread", "0.7", "--precision", "bf16-mixed", "--accelerator", "cpu"]) == 0
    written = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert written["batch_size"] == 7 and written["precision"] == "bf16-mixed"
    assert written["test/acc"] == pytest.approx(trained["test/acc"], abs=0.02)


def test_a_missing_checkpoint_is_a_clear_error(task, tmp_path, capsys):
    assert main(["--ckpt_path", str(tmp_path / "none.ckpt")]) == 2
    assert "none.ckpt is missing, damaged or not a checkpoint of scripts/train.py ([Errno 2] No such file" in one_line(
        capsys.readouterr().err
    )


def test_a_truncated_checkpoint_is_a_clear_error_and_writes_nothing(task, trained, tmp_path, capsys):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(Path(trained["best_checkpoint"]).read_bytes()[:1000])
    assert main(["--ckpt_path", str(corrupt), "--output_dir", str(tmp_path / "e")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "is missing, damaged or not a checkpoint of scripts/train.py" in err and "Traceback" not in err
    assert not (tmp_path / "e").exists()


def test_a_bad_batch_size_is_named_not_blamed_on_the_checkpoint(task, trained, tmp_path, capsys):
    flags = ["--ckpt_path", trained["best_checkpoint"], "--batch_size", "0", "--output_dir", str(tmp_path / "e")]
    assert main(flags) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith('Error: Parser key "batch_size"') and not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--data.samples", "many"], "samples"),
        (["--data.spread", "wide"], "spread"),
        (["--data.no_such_argument", "1"], "no_such_argument"),
    ],
)
def test_a_bad_data_argument_is_named_not_blamed_on_the_checkpoint(task, trained, tmp_path, capsys, flags, phrase):
    """The data module's signature refuses it, in jsonargparse's words."""
    assert main(["--ckpt_path", trained["best_checkpoint"], *flags, "--output_dir", str(tmp_path / "e")]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("Error: ") and phrase in err and err.count("Error:") == 1, err
    assert "Traceback" not in err and "checkpoint" not in err and not (tmp_path / "e").exists()


def test_a_network_that_cannot_be_imported_is_named(task, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert train_main(["--output_dir", str(run), *QUICK, "--net", "helpers.linear_net"]) == 0
    monkeypatch.setitem(sys.modules, "helpers", None)  # as in a shell where the module is not on the path
    assert main(["--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--output_dir", str(tmp_path / "e")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "cannot be loaded here" in err and "helpers" in err
    assert "PYTHONPATH" in err


def test_a_data_module_that_cannot_be_imported_is_named(task, trained, tmp_path, capsys):
    contents = torch.load(trained["best_checkpoint"], weights_only=True)
    contents["datamodule_hyper_parameters"]["_class_path"] = "not_installed.MyData"
    torch.save(contents, tmp_path / "moved.ckpt")
    assert main(["--ckpt_path", str(tmp_path / "moved.ckpt"), "--output_dir", str(tmp_path / "e")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "cannot be loaded here" in err and "not_installed" in err and "PYTHONPATH" in err
    # A checkpoint that does not record its data module was not written by train.py: it cannot be evaluated.
    del contents["datamodule_hyper_parameters"]
    torch.save(contents, tmp_path / "foreign.ckpt")
    assert main(["--ckpt_path", str(tmp_path / "foreign.ckpt"), "--output_dir", str(tmp_path / "e")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "not a checkpoint of scripts/train.py (it has no datamodule_hyper_parameters)" in err
    assert not (tmp_path / "e").exists()


def test_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out


def flip_weights(source: Path, target: Path) -> Path:
    """The checkpoint with bytes flipped inside its weights: still a zip that torch.load reads without complaint."""
    import zipfile

    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:  # the largest tensor (torch keeps each in data/N): a weight matrix
        record = max((info for info in archive.infolist() if "/data/" in info.filename), key=lambda i: i.file_size)
    start = record.header_offset + 30 + len(record.filename.encode()) + len(record.extra) + record.file_size // 4
    length = record.file_size // 2
    data[start : start + length] = bytes(byte ^ 0x5A for byte in data[start : start + length])
    target.write_bytes(bytes(data))
    return target


def nan_weights(source: Path, target: Path) -> Path:
    """An edited file: train.py keeps no weights that are not finite."""
    contents = torch.load(source, weights_only=True)
    weights = next(tensor for tensor in contents["state_dict"].values() if tensor.is_floating_point())
    weights.view(-1)[0] = float("nan")
    torch.save(contents, target)
    return target


DAMAGES = {
    "flipped bits": (
        flip_weights,
        ["is missing, damaged or not a checkpoint of scripts/train.py", "no longer matches its checksum"],
    ),
    "NaN weights": (nan_weights, ["holds weights that are not finite"]),
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("entry", ["evaluate", "predict", "export", "train"])
def test_a_damaged_checkpoint_is_refused_by_every_entry_point(task, trained, tmp_path, capsys, entry, damage):
    from importlib import import_module

    make, phrases = DAMAGES[damage]
    damaged = make(Path(trained["best_checkpoint"]), tmp_path / "damaged.ckpt")
    flags = ["--ckpt_path", str(damaged)]
    if entry == "train":  # fine-tuning from it
        flags += QUICK
    if entry != "predict":
        flags += ["--output_dir", str(tmp_path / "out")]
    assert import_module(f"mnist_lightning.core.{entry}").main(flags) == 2
    err = one_line(capsys.readouterr().err)
    assert f"{damaged} {phrases[0]}" in err and all(phrase in err for phrase in phrases), err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_output_to_a_file_or_a_pipe_has_no_progress_bar(task, trained, tmp_path, capsys):
    """As train.py: a bar only in a terminal (captured output is not one), where its redraws do not pile up."""
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    captured = capsys.readouterr()
    assert "Testing" not in captured.out + captured.err and captured.out.startswith("Tested: ")


def test_sigterm_while_testing_stops_with_one_line(task, trained, tmp_path, monkeypatch, capsys):
    """SIGTERM (kill, timeout) ends evaluate.py as Ctrl-C does: through its clean-up, one line, status 143."""
    import tasks

    def terminated(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # while trainer.test runs, under Lightning's own SIGTERM handler

    monkeypatch.setattr(tasks.Classify, "test_step", terminated)
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 143
    assert capsys.readouterr().err.strip() == "Stopped by SIGTERM."
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # given back to the caller
    assert not (tmp_path / "e").exists()  # the new folder it had made (and locked) is removed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_arriving_as_it_finishes_does_not_fail_a_complete_result(task, trained, tmp_path, monkeypatch, signum):
    """Ctrl-C or SIGTERM once the results are written (here: as its last clean-up runs) changes nothing: status 0,
    and the caller's handlers are given back."""
    import mnist_lightning.core.errors

    monkeypatch.setattr(mnist_lightning.core.errors, "end_process_group", lambda: os.kill(os.getpid(), signum))
    assert main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")]) == 0
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["test/acc"] == trained["test/acc"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


TRAINER_REFUSALS = [  # (the entry point, its flags, what Lightning's message says)
    ("evaluate", ["--precision", "7"], "Precision '7' is invalid. Allowed precision values"),
    ("evaluate", ["--accelerator", "foo"], "accelerator='foo'"),
    ("evaluate", ["--accelerator", "cpu", "--devices", "abc"], "`devices`"),
    ("predict", ["--accelerator", "foo"], "accelerator='foo'"),
]


@pytest.mark.parametrize(
    ("entry", "flags", "said"), TRAINER_REFUSALS, ids=[" ".join(f) for _, f, _ in TRAINER_REFUSALS]
)
def test_trainer_settings_lightning_refuses_are_its_message(
    task, trained, tmp_path, monkeypatch, capsys, entry, flags, said
):
    """As train.py's: Lightning's refusal, without a traceback, and no folder made."""
    from importlib import import_module

    monkeypatch.chdir(tmp_path)  # evaluate.py's new folder: runs/<time> here
    assert import_module(f"mnist_lightning.core.{entry}").main(["--ckpt_path", trained["best_checkpoint"], *flags]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("Error: ") and said in err and "Traceback" not in err
    assert not list(tmp_path.glob("runs/*"))


@pytest.mark.parametrize("entry", ["evaluate", "predict"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_data_value_that_is_not_finite_is_refused_as_train_refuses_it(
    task, trained, tmp_path, monkeypatch, capsys, entry, value
):
    """--data.NAME VALUE is text: YAML reads nan as a string, which jsonargparse refuses for a float."""
    from importlib import import_module

    monkeypatch.chdir(tmp_path)
    assert train_main([*QUICK, "--output_dir", "bad", "--data.spread", value]) == 2
    assert "spread" in capsys.readouterr().err
    entry_main = import_module(f"mnist_lightning.core.{entry}").main
    assert entry_main(["--ckpt_path", trained["best_checkpoint"], "--data.spread", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "spread" in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_ctrl_c_during_the_trainer_call_is_an_interrupt(task, trained, tmp_path, capsys, monkeypatch, command):
    """Lightning catches the KeyboardInterrupt and ends its call with exit(1): still the one line and status 130."""
    import tasks

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tasks.Classify, "test_step" if command == "evaluate" else "predict_step", ctrl_c)
    if command == "evaluate":
        code = main(["--ckpt_path", trained["best_checkpoint"], "--output_dir", str(tmp_path / "e")])
    else:
        code = predict_main(["--ckpt_path", trained["best_checkpoint"], "--output", str(tmp_path / "p.csv")])
    assert code == 130 and capsys.readouterr().err.strip() == "Interrupted."
    assert not list(tmp_path.iterdir())  # no folder, no half-written output
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Lightning's SIG_IGN is undone
