"""scripts/train.py's command line (cli.py), on the tests' own task: flags, config files, the run record, --help and
clear errors. (The example's own options and the shipped configs/: tests/test_example_train.py.)"""

import inspect
import re
import runpy
import sys

import pytest
import torch
import yaml
from helpers import QUICK, ROOT, one_line
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor

from mnist_lightning.core.callbacks import StopTogether
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.cli import build, build_parser, parse_args
from mnist_lightning.core.runs import open_run
from mnist_lightning.core.train import main, train


def tiny(output_dir, *flags) -> list[str]:
    return ["--output_dir", str(output_dir), *QUICK, "--accelerator", "cpu", *flags]


def test_accelerator_and_devices_are_top_level_flags(task):
    config = parse_args(["--accelerator", "cpu", "--devices", "1"])
    # Trainer types devices as list[int] | str | int, so the flag arrives as "1", which Lightning reads as 1.
    assert (config.accelerator, str(config.devices)) == ("cpu", "1")


def test_every_trainer_argument_and_every_option_of_the_model_is_a_flag(task):
    keys = set(build_parser().get_defaults().keys())
    trainer_args = set(inspect.signature(Trainer.__init__).parameters) - {"self", "default_root_dir"}
    assert trainer_args <= keys
    defaults = parse_args([])  # tasks.Classify's options; its arguments without a default are the data module's
    assert defaults.lr == 0.05 and defaults.net.class_path == "own_data.MLP"
    assert not {"input_shape", "num_classes"} & keys


def test_config_file_then_flags_override_it(task, tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("max_epochs: 7\nlr: 0.1\nbatch_size: 32\ndata:\n  init_args:\n    samples: 90\n")
    config = parse_args(["--config", str(config_file), "--lr", "0.3"])
    assert (config.max_epochs, config.lr, config.batch_size, config.data.init_args.samples) == (7, 0.3, 32, 90)


def test_callbacks_by_class_path_are_built_and_the_learning_rate_is_logged(task, tmp_path):
    flags = tiny(tmp_path / "run", "--callbacks+=EarlyStopping", "--callbacks.monitor=val/acc", "--callbacks.mode=max")
    config = parse_args(flags)
    with open_run(config) as opened:
        training = build(config, opened)
        kinds = {type(callback) for callback in training.trainer.callbacks}
        assert {EarlyStopping, LearningRateMonitor} <= kinds
        assert StopTogether not in kinds  # only a multi-process run needs it: Lightning calls every callback every step
        train(training)
    header = (tmp_path / "run" / "logs" / "version_0" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "lr-Adam" in header and "train/loss" in header


def test_print_config_prints_the_resolved_yaml(task, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--max_epochs", "3", "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["max_epochs"] == 3 and printed["accelerator"] == "auto" and printed["lr"] == 0.05
    assert printed["net"]["class_path"] == "own_data.MLP" and printed["data"]["class_path"] == "own_data.Points"


def test_help_is_readable_and_shows_the_true_defaults(task, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--lr", "--batch_size", "--accelerator", "--precision", "--max_epochs", "--net", "--data"):
        assert flag in out
    devices_help = one_line(out.split("\n  --devices DEVICES")[1].split("\n  --")[0])
    assert "default: 1)" in devices_help
    # The data module's own arguments are on its page, which --help names.
    assert "--data.help CLASS_PATH" in one_line(out) and "The main advantage is" not in out
    with pytest.raises(SystemExit):
        parse_args(["--data.help", "own_data.Points"])
    page = capsys.readouterr().out
    for flag in ("--data.samples", "--data.spread"):
        assert flag in page


@pytest.mark.parametrize("entry", ["evaluate", "predict", "export"])
def test_every_option_of_the_other_entry_points_is_described_in_their_help(capsys, entry):
    from importlib import import_module

    with pytest.raises(SystemExit):
        import_module(f"mnist_lightning.core.{entry}").build_parser().parse_args(["--help"])
    out = capsys.readouterr().out.split("options:")[1]
    blocks = [re.sub(r"^(\S+)( [A-Z_]+)?", r"--\1", block.strip()) for block in out.split("\n  --")[1:]]
    undescribed = [block.split()[0] for block in blocks if block.split(maxsplit=1)[1].startswith("(type:")]
    assert not undescribed, undescribed


def test_an_unknown_option_is_the_parsers_message(task, capsys):
    assert main(["--learning_rate", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "--learning_rate" in err and "usage:" not in err
    assert main(["--max_epoch", "3"]) == 2  # never abbreviated silently
    assert "--max_epoch" in capsys.readouterr().err


def test_a_bad_flag_is_one_paragraph_without_a_usage_dump(task, capsys):
    assert main(["--max_epochs", "many"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error:") and "max_epochs" in err and "usage:" not in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpu_without_a_gpu_is_one_clear_paragraph(task, tmp_path, capsys):
    output_dir = tmp_path / "run"
    code = main(["--accelerator", "gpu", "--devices", "1", "--output_dir", str(output_dir)])
    err = one_line(capsys.readouterr().err)
    assert code == 2
    assert err.startswith("Error: --accelerator gpu asks for a GPU, but none can be used")
    assert "--accelerator cpu" in err and "Traceback" not in err
    assert not output_dir.exists()


def test_script_is_a_thin_wrapper(task, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train.py", "--print_config"])
    with pytest.raises(SystemExit) as exit_info:
        monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # as `python scripts/x.py` does
        runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "max_epochs: 12" in out and "class_path: own_data.Points" in out  # the project's configured classes


def test_a_run_records_its_resolved_configuration(task, tmp_path):
    assert main(tiny(tmp_path / "run", "--lr", "0.07", "--net.hidden", "8", "--data.spread", "0.5")) == 0
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (record["lr"], record["max_epochs"], record["batch_size"], record["accelerator"]) == (0.07, 2, 32, "cpu")
    assert record["data"] == {"class_path": "own_data.Points", "init_args": {"samples": 600, "spread": 0.5}}
    assert record["net"] == {"class_path": "own_data.MLP", "init_args": {"hidden": 8, "dropout": 0.0}}
    assert record["output_dir"] is None and record["ckpt_path"] is None  # where a run lives is not what it is
    # The model's hyperparameters, as load_from_checkpoint rebuilds it: its options and the data's sizes.
    model = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt").model
    assert (model.hparams.lr, list(model.hparams.input_shape), model.hparams.num_classes) == (0.07, [2], 3)


def test_a_function_that_builds_the_network_is_recorded_by_its_import_path(task, tmp_path):
    run = tmp_path / "run"
    assert main(tiny(run, "--net", "helpers.linear_net", "--max_epochs", "1")) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["net"] == "helpers.linear_net"
    # In the checkpoint as a name, not as pickled code: it loads with weights_only and rebuilds the network.
    assert isinstance(load_checkpoint(run / "checkpoints" / "last.ckpt").model.net, torch.nn.Sequential)


def test_the_record_reproduces_the_run(task, tmp_path):
    """--config runs/<run>/config.yaml trains the same run again: same weights, same test accuracy."""
    assert main(tiny(tmp_path / "first", "--seed", "7", "--deterministic", "true", "--net.dropout", "0.2")) == 0
    again = ["--config", str(tmp_path / "first" / "config.yaml"), "--output_dir", str(tmp_path / "again")]
    assert main(again) == 0
    first, second = (torch.load(tmp_path / run / "checkpoints" / "last.ckpt") for run in ("first", "again"))
    assert all(first["state_dict"][key].equal(second["state_dict"][key]) for key in first["state_dict"])
    metrics = [yaml.safe_load((tmp_path / run / "metrics.json").read_text()) for run in ("first", "again")]
    assert metrics[0]["test/acc"] == metrics[1]["test/acc"] and metrics[0]["test/loss"] == metrics[1]["test/loss"]


def test_resume_needs_only_the_run_folder(task, tmp_path):
    """A run resumed with --output_dir and --ckpt_path last takes every other option from its config.yaml."""
    run = tmp_path / "run"
    assert main(tiny(run, "--batch_size", "50", "--lr", "0.07")) == 0
    assert main([f"--output_dir={run}", "--ckpt_path=last", "--max_epochs", "3"]) == 0  # either form of a flag
    record = yaml.safe_load((run / "config.yaml").read_text())
    assert (record["batch_size"], record["lr"], record["max_epochs"]) == (50, 0.07, 3)
    metrics = yaml.safe_load((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == [0, 1, 2]


def test_resume_refuses_options_that_would_mix_two_configurations(task, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(tiny(run)) == 0
    capsys.readouterr()
    before = sorted(path.name for path in run.rglob("*"))
    assert main(["--output_dir", str(run), "--ckpt_path", "last", "--lr", "0.5", "--batch_size", "7"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("Error: A resume cannot change ") and "Traceback" not in err
    assert "--lr from 0.05 to 0.5" in err and "--batch_size from 32 to 7" in err
    assert sorted(path.name for path in run.rglob("*")) == before
