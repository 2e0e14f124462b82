"""What a mistake gets (the README's error table): a mistake with the template's own commands, files or machine is one
paragraph; a bad value or an unknown flag is the parser's or Lightning's own message, with no traceback or usage; an
error in the user's own code is Python's traceback after one line naming their hook. Each exits non-zero and writes
nothing. On the tests' own task; the example's own refusals (MNIST's files, the Classifier's options and checks) are in
tests/test_example_errors.py."""

import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import QUICK, one_line
from lightning.fabric.utilities.exceptions import MisconfigurationException
from tasks import Classify

from mnist_lightning.core.cli import build_parser, parse_args
from mnist_lightning.core.train import main

ROOT = Path(__file__).resolve().parents[1]

# (flags, exit status, phrases the message must contain): the option and the value, as the library names them.
BAD_FLAGS = [
    # Lightning's own refusals
    (["--devices", "0"], 2, ["devices='0'"]),
    (["--devices", "-1", "--accelerator", "cpu"], 2, ["`devices`", "CPUAccelerator"]),
    (["--accelerator", "gpux"], 2, ["accelerator='gpux'"]),
    (["--strategy", "nonsense"], 2, ["strategy='nonsense'"]),
    (["--max_time", "soon"], 2, ["duration='soon'"]),
    (["--max_epochs", "-5"], 2, ["`max_epochs`", "-5"]),
    (["--limit_train_batches", "1.5"], 2, ["1.5 for limit_train_batches"]),
    (["--val_check_interval", "1.5"], 2, ["1.5 for val_check_interval"]),
    (["--val_check_interval", "50"], 2, ["`val_check_interval` (50)"]),
    (["--callbacks+=EarlyStopping", "--callbacks.monitor=val_acc"], 2, ["`val_acc`", "val/acc"]),
    (["--limit_val_batches", "0.001"], 2, ["check 0.001 of the `val_dataloader`"]),
    # The parser's (jsonargparse's, and for the bounds pydantic's) refusals
    (["--batch_size", "0"], 2, ['"batch_size"', "0"]),
    (["--batch_size", "1e9"], 2, ['"batch_size"', "1e9"]),
    (["--max_epochs", "1e2"], 2, ['"max_epochs"', "1e2"]),
    (["--seed", "2.5"], 2, ['"seed"', "2.5"]),
    (["--lr", "fast"], 2, ['"lr"', "fast"]),
    (["--logger", "foo"], 2, ['"logger"', "foo"]),
    (["--precision", "12"], 2, ['"precision"', "12"]),
    (["--data.sample", "9"], 2, ["'sample'"]),
    (["--data.samples", "many"], 2, ['"samples"', "many"]),
    (["--data", "torch.nn.Linear"], 2, ['"data"', "torch.nn.Linear"]),
    (["--data", "nowhere.Data"], 2, ["nowhere"]),
    (["--net", "helpers.SmallCNN", "--net.width", "3"], 2, ["'width'"]),
    (["--net.num_classes", "3"], 2, ["'num_classes'"]),
    (["--net", "torch.nn.Nonexistent"], 2, ["Nonexistent"]),
    (["--device", "cpu"], 2, ["--device"]),
    (["--quiet"], 2, ["--quiet"]),  # gone: --enable_progress_bar false --enable_model_summary false
    (["--config", "missing.yaml"], 2, ["missing.yaml"]),
    # The template's own paragraphs: what no library checks
    (["--data.batch_size", "7"], 2, ["--data.batch_size: the batch size is the top-level --batch_size"]),
    (["--accumulate_grad_batches", "0"], 2, ["accumulate_grad_batches", "greater than 0"]),
    (["--accumulate_grad_batches", "-2"], 2, ["accumulate_grad_batches", "greater than 0"]),
    (["--check_val_every_n_epoch", "0"], 2, ["check_val_every_n_epoch", "greater than"]),
    (["--data.batch_size=7"], 2, ["--data.batch_size: the batch size is the top-level --batch_size"]),
    (["--num_nodes", "2"], 2, ["--num_nodes 2 needs one process per machine, started by torchrun or srun"]),
    (["--ckpt_path", "last"], 2, ["holds no run to resume"]),  # a resume of the run in --output_dir
    (["--max_time", "00:00:00:00"], 2, ["allowed no training step: there is no model to test"]),
]


class Scheduled(Classify):
    """tasks.Classify with a schedule over the run's length, as the example's Classifier has: its
    configure_optimizers asks Lightning for the run's steps (which Lightning may refuse to count), and refuses a run
    without an end in one paragraph, as a user's code says that a setting cannot work (MisconfigurationException)."""

    def configure_optimizers(self):
        if math.isinf(steps := self.trainer.estimated_stepping_batches):
            raise MisconfigurationException("--max_epochs -1 gives this schedule no end: give --max_steps.")
        optimizer = super().configure_optimizers()
        schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.0, total_iters=steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def run(output_dir, *flags) -> int:
    return main(["--output_dir", str(output_dir), *QUICK, *flags])


def assert_clean_failure(capsys, code, expected_code, phrases, output_dir):
    captured = capsys.readouterr()
    message = one_line(captured.err)
    assert code == expected_code, message
    assert "Traceback" not in captured.err + captured.out and "usage:" not in captured.err
    assert message.count("Error:") == 1, message
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    assert not output_dir.exists() or not any(output_dir.iterdir())


def test_a_network_without_trainable_parameters_gets_torchs_own_message(task, tmp_path, capsys):
    """Nothing to train: torch's optimizer refuses it, in the model's configure_optimizers (the user's code)."""
    assert run(tmp_path / "run", "--net", "helpers.NoWeights") == 1
    err = capsys.readouterr().err
    assert "configure_optimizers() of your code raised ValueError" in err
    assert "optimizer got an empty parameter list" in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize(("flags", "expected_code", "phrases"), BAD_FLAGS, ids=[" ".join(f) for f, _, _ in BAD_FLAGS])
def test_bad_flags(task, tmp_path, capsys, monkeypatch, flags, expected_code, phrases):
    monkeypatch.chdir(tmp_path)
    code = run(tmp_path / "run", *flags)
    assert_clean_failure(capsys, code, expected_code, phrases, tmp_path / "run")


@pytest.mark.parametrize(
    ("flags", "phrases"),
    [
        # Raised by Lightning within the model's configure_optimizers (estimated_stepping_batches): still its message
        (["--val_check_interval", "50"], ["`val_check_interval` (50)"]),
        # A user's MisconfigurationException: their paragraph, after Lightning's banners
        (["--max_epochs", "-1"], ["--max_epochs -1 gives this schedule no end: give --max_steps."]),
    ],
    ids=["Lightning's, within a hook", "the user's own"],
)
def test_a_refused_setting_within_the_models_hook_is_one_paragraph(task, tmp_path, capsys, flags, phrases):
    task("test_errors.Scheduled")
    code = run(tmp_path / "run", *flags)
    assert_clean_failure(capsys, code, 2, phrases, tmp_path / "run")


@pytest.mark.parametrize(
    ("config_text", "phrases"),
    [
        ("max_epochs: 3\nlr: 0.1\nmax_epochs: 5\n", ["bad.yaml, line 3: max_epochs is set twice"]),  # ours
        ("max_epochs: [1,\n", ["line 2"]),
        ("max_epochs: 2\nbatchsize: 10\n", ["'batchsize'"]),
        ("", ["config"]),
        ("- max_epochs\n- 3\n", ["max_epochs"]),
        ("\xff\xfe", ["utf-8"]),
        ("data:\n  init_args:\n    batch_size: 3\n", ["batch_size under data: init_args:", "top-level --batch_size"]),
        ("trainer:\n  max_epochs: 3\n", ["'trainer.max_epochs'"]),
        ("max_epochs: two\n", ['"max_epochs"', "two"]),
        ("seed: .nan\n", ['"seed"', "nan"]),
        ("net:\n  class_path: helpers.SmallCNN\n  channels: 4\n", ['"net"', "'class_path'"]),
    ],
    ids=[
        *("duplicate key", "malformed", "unknown key", "empty", "a list", "binary", "data batch_size"),
        *("LightningCLI layout", "not a number", "nan", "beside class_path"),
    ],
)
def test_bad_config_files(task, tmp_path, capsys, config_text, phrases):
    (tmp_path / "bad.yaml").write_bytes(config_text.encode("latin-1"))
    code = run(tmp_path / "run", "--config", str(tmp_path / "bad.yaml"))
    assert_clean_failure(capsys, code, 2, phrases, tmp_path / "run")


@pytest.mark.parametrize(
    ("edit", "flags"),
    [("max_epochs: two", []), ("max_epochs: two", ["--max_epochs", "4"]), ("batch_size: 0", [])],
    ids=["parsed", "parsed, max_epochs typed", "bound"],
)
def test_a_bad_value_in_a_resumed_runs_record_is_refused(task, tmp_path, capsys, edit, flags):
    # The record as a run writes it (parsing fails before its checkpoints are looked for), then edited by hand.
    record = build_parser().dump(parse_args(QUICK), skip_none=False)  # as a run writes it
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(re.sub(rf"^{edit.split(':')[0]}: .*$", edit, record, flags=re.M))
    code = main(["--output_dir", str(tmp_path / "run"), "--ckpt_path", "last", *flags])
    assert_clean_failure(capsys, code, 2, [f'"{edit.split(":")[0]}"'], tmp_path / "nothing")


def test_a_resume_of_a_run_that_left_nothing_says_to_run_its_command_again(task, tmp_path, capsys):
    """Killed during its imports: no folder, no record."""
    assert main(["--output_dir", str(tmp_path / "run"), "--ckpt_path", "last"]) == 2
    message = one_line(capsys.readouterr().err)
    assert "holds no run to resume" in message and "run its own command again, without --ckpt_path last" in message
    assert not (tmp_path / "run").exists()
    assert main(["--ckpt_path", "last"]) == 2  # and with no folder named
    assert "A resume names the run's folder: --output_dir RUN --ckpt_path last." in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "flags",
    [["--max_epochs", "0"], ["--limit_train_batches", "0"], ["--max_steps", "0"], ["--max_time", "00:00:00:00"]],
    ids=["max_epochs", "limit_train_batches", "max_steps", "max_time"],
)
def test_settings_that_train_nothing_report_no_scores(task, tmp_path, capsys, flags):
    code = run(tmp_path / "run", *flags)
    captured = capsys.readouterr()
    assert "Tested" not in captured.out and "test/" not in captured.out
    message = one_line(captured.err)
    assert code == 2 and "allowed no training step: there is no model to test" in message and "Traceback" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("flag", "fraction", "least"), [("limit_train_batches", "0.00001", "0.1"), ("limit_val_batches", "0.001", "0.25")]
)
def test_a_fraction_that_leaves_no_batch_is_one_paragraph_after_the_banners(
    task, tmp_path, capfd, flag, fraction, least
):
    # The data module alone knows its number of batches (10 to train, 4 to validate here), so Lightning says it once
    # its loaders exist: after its banners, as the last paragraph, and no run folder is left.
    assert run(tmp_path / "run", "--batch_size", "36", f"--{flag}", fraction) == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    message = err[err.index("Error:") :].strip()
    assert "\n\n" not in message and "Error:" not in message[1:], message
    assert f"Please increase the `{flag}` argument. Try at least `{flag}={least}`" in one_line(message)
    assert not (tmp_path / "run").exists()


def test_a_data_mistake_is_reported_before_lightnings_banners(task, tmp_path, capfd):
    """The data module is built first: a value its own code refuses is named before the Trainer prints anything."""
    assert run(tmp_path / "run", "--data.samples", "10") == 1
    err = capfd.readouterr().err
    assert err.startswith("Error: Points.__init__() of your code raised ValueError; its traceback:"), err
    assert "samples must be at least 30, got 10" in err and "GPU available" not in err
    assert not (tmp_path / "run").exists()


def test_an_output_folder_that_cannot_be_written(task, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    code = run(tmp_path / "a_file" / "run")
    assert code == 2 and "cannot be written" in one_line(capsys.readouterr().err)


def test_a_checkpoint_of_another_model_is_refused(task, tmp_path, capsys):
    from mnist_lightning.core.evaluate import main as evaluate_main

    other = {"hyper_parameters": {}, "state_dict": {"net.linear.weight": torch.zeros(3, 3)}, "epoch": 0}
    torch.save(other, tmp_path / "other.ckpt")
    assert evaluate_main(["--ckpt_path", str(tmp_path / "other.ckpt"), "--output_dir", str(tmp_path / "e")]) == 2
    assert (
        "not a checkpoint of scripts/train.py (it has no datamodule_hyper_parameters, pytorch-lightning_version)"
        in one_line(capsys.readouterr().err)
    )


def test_no_usable_gpu_says_why(task, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    code = run(tmp_path / "run", "--accelerator", "gpu")
    assert_clean_failure(capsys, code, 2, ["--accelerator gpu asks for a GPU, but none can be used"], tmp_path / "run")


BAD = "is missing, damaged or not a checkpoint of scripts/train.py"


def another_programs_files(folder) -> dict[str, object]:
    """What users pass as --ckpt_path by mistake: name -> path."""
    (folder / "empty.ckpt").write_bytes(b"")
    (folder / "notes.ckpt").write_text("epoch: 3\nthis is not a checkpoint\n")
    torch.save({"weights": torch.zeros(3)}, folder / "a_dict.ckpt")
    other_model = {
        "state_dict": {"encoder.weight": torch.zeros(4, 4)},
        "hyper_parameters": {"hidden": 4},
        "datamodule_hyper_parameters": {"_class_path": "own_data.Points"},
        "epoch": 2,
        "pytorch-lightning_version": "2.6.0",
    }
    torch.save(other_model, folder / "other_model.ckpt")
    torch.save(torch.nn.Linear(2, 2), folder / "module.ckpt")  # a pickled object: loading it could run code
    # A Lightning checkpoint of another program: no record of the data module that train.py keeps in every one.
    torch.save({key: value for key, value in other_model.items() if "datamodule" not in key}, folder / "foreign.ckpt")
    return {
        "missing": (folder / "missing.ckpt", "No such file"),
        "folder": (folder, "Is a directory"),
        "best": (
            "best",
            f"best {BAD} ([Errno 2] No such file or directory: 'best'). Restore it from a copy, or pass another .ckpt",
        ),
        "empty": (folder / "empty.ckpt", f"{BAD} (File is not a zip file)"),
        "text": (folder / "notes.ckpt", BAD),
        "a dict": (folder / "a_dict.ckpt", f"{BAD} (it has no state_dict, hyper_parameters,"),
        "another model": (folder / "other_model.ckpt", "weights of another network"),
        "foreign": (folder / "foreign.ckpt", f"{BAD} (it has no datamodule_hyper_parameters)"),
        "object": (folder / "module.ckpt", "it holds more than tensors and plain values"),
    }


@pytest.mark.parametrize(
    "kind", ["missing", "folder", "best", "empty", "text", "a dict", "another model", "foreign", "object"]
)
def test_anything_but_a_good_checkpoint_is_refused_by_train(task, tmp_path, capsys, kind):
    path, phrase = another_programs_files(tmp_path)[kind]
    code = run(tmp_path / "run", "--ckpt_path", str(path))
    assert_clean_failure(capsys, code, 2, [phrase], tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_refused_by_the_unpickler_gets_no_advice_to_unpickle(task, tmp_path, capsys):
    (tmp_path / "pickle.ckpt").write_bytes(b"\x80\x04\x95" + b"not really" * 10)
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.ckpt")  # torch's refusal suggests weights_only=False
    for name in ("pickle.ckpt", "module.ckpt"):
        assert run(tmp_path / "run", "--ckpt_path", str(tmp_path / name)) == 2
        assert "weights_only=False" not in capsys.readouterr().err


def test_evaluate_reports_a_bad_command_line_as_the_parser_does(capsys):
    from mnist_lightning.core.evaluate import main as evaluate_main

    assert evaluate_main(["--batch_size", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith('Error: Parser key "batch_size"') and "abc" in err and "usage:" not in err


def test_print_config_checks_the_values_it_prints(task, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--batch_size", "64", "--print_config"])
    assert stop.value.code == 0 and "batch_size: 64" in capsys.readouterr().out
    assert main(["--batch_size", "0", "--print_config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and '"batch_size"' in captured.err  # jsonargparse's own check, before it prints


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
def test_an_accelerator_whose_package_is_missing_is_lightnings_message(task, tmp_path, capsys):
    # Lightning knows "tpu" but needs torch_xla for it, and raises an ImportError as it builds the accelerator.
    code = run(tmp_path / "run", "--accelerator", "tpu")
    assert_clean_failure(capsys, code, 2, ["torch_xla"], tmp_path / "run")


@pytest.mark.parametrize(
    ("formats", "phrase"),
    [(["tflite"], "invalid choice: 'tflite' (choose from 'pt2', 'onnx')"), (["[pt2]"], "invalid choice")],
)
def test_export_formats_are_named_as_its_help_says(tmp_path, capsys, formats, phrase):
    from mnist_lightning.core.export import main as export_main

    code = export_main(["--ckpt_path", str(tmp_path / "x.ckpt"), "--formats", *formats])
    err = one_line(capsys.readouterr().err)
    assert code == 2 and phrase in err and "Traceback" not in err and not (tmp_path / "exports").exists()


def test_evaluate_refuses_a_batch_size_below_one(capsys):
    from mnist_lightning.core.evaluate import main as evaluate_main

    assert evaluate_main(["--ckpt_path", "x.ckpt", "--batch_size", "0"]) == 2
    err = capsys.readouterr().err
    assert '"batch_size"' in err and "Traceback" not in err


def test_a_whole_batch_size_written_with_an_exponent_in_a_config_file_is_taken(task, tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text("batch_size: 1e3\n")
    with pytest.raises(SystemExit) as stop:
        main(["--config", str(tmp_path / "mine.yaml"), "--print_config"])
    assert stop.value.code == 0 and "\nbatch_size: 1000\n" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_while_a_finished_command_exits_leaves_its_status(tmp_path, name):
    """Ctrl-C or SIGTERM once the command is done, while Python shuts down (here: at its last exit handler)."""
    stop = f"import atexit, os, signal\natexit.register(lambda: os.kill(os.getpid(), signal.{name}))\n"
    (tmp_path / "sitecustomize.py").write_text(stop)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "devices.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": path},
    )
    assert result.returncode == 0 and not result.stderr, result.stderr


# Imported first in every Python started with this folder on PYTHONPATH: the import of HANG_AT waits (a minute)
# after writing READY, so Ctrl-C is sent while that import is under way, never a moment too early or too late.
SLOW_IMPORT = """
import os, sys, time

class SlowImport:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["HANG_AT"]:
            sys.meta_path.remove(self)
            open(os.environ["READY"], "w").close()
            time.sleep(60)

sys.meta_path.insert(0, SlowImport())
"""


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train.py", "evaluate.py"])
def test_ctrl_c_while_a_script_imports_ends_it_without_a_traceback(tmp_path, script):
    """`python scripts/train.py ...` and Ctrl-C while Python imports torch: status 130, no traceback."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT)
    ready = tmp_path / "ready"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / script), "--help"],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": path, "HANG_AT": "torch", "READY": str(ready)},
    )
    deadline = time.monotonic() + 60
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), process.communicate()[1]
    process.send_signal(signal.SIGINT)
    err = process.communicate(timeout=60)[1]
    assert process.returncode == 130 and "Traceback" not in err, err


def test_whose_code_a_file_is():
    """The boundary's test of whose error it shows with a traceback: the user's files (theirs in the package, or
    anywhere else), not Python's, an installed library's (in any environment), or the machinery's."""
    import jsonargparse
    import lightning
    import own_data

    import mnist_lightning.core.errors as errors
    import mnist_lightning.lightning_module as lightning_module

    assert errors.in_user_code(__file__) and errors.in_user_code(lightning_module.__file__)
    assert errors.in_user_code(own_data.__file__)
    assert not errors.in_user_code(errors.__file__) and not errors.in_user_code(os.__file__)
    assert not errors.in_user_code(jsonargparse.__file__) and not errors.in_user_code(lightning.__file__)
