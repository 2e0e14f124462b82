"""scripts/train.py's command line: flags, config files, --print_config, --help and clear errors."""

import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import one_line

from mnist_lightning.train import build_parser, main, parse_config

ROOT = Path(__file__).resolve().parents[1]


def test_accelerator_and_devices_are_top_level_flags():
    config = parse_config(["--accelerator", "cpu", "--devices", "1"])
    # Trainer types devices as list[int] | str | int, so the flag arrives as "1", which Lightning reads as 1.
    assert (config.accelerator, str(config.devices)) == ("cpu", "1")


def test_every_trainer_argument_is_a_flag():
    import inspect

    from lightning.pytorch import Trainer

    keys = set(build_parser().get_defaults().keys())
    trainer_args = set(inspect.signature(Trainer.__init__).parameters) - {"self", "default_root_dir"}
    assert trainer_args <= keys


def test_config_file_then_flags_override_it(tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("max_epochs: 7\nlr: 0.1\nbatch_size: 32\n")
    config = parse_config(["--config", str(config_file), "--lr", "0.3"])
    assert (config.max_epochs, config.lr, config.batch_size) == (7, 0.3, 32)


def test_callbacks_by_class_path_are_built():
    from lightning.pytorch.callbacks import EarlyStopping

    config = parse_config(["--callbacks+=EarlyStopping", "--callbacks.monitor=val/acc", "--callbacks.mode=max"])
    (callback,) = config.callbacks
    assert isinstance(callback, EarlyStopping) and callback.monitor == "val/acc"


def test_default_yaml_holds_exactly_the_defaults():
    parser = build_parser()
    from_file = parser.parse_args(["--config", str(ROOT / "configs" / "default.yaml")])
    defaults = parser.parse_args([])
    from_file.pop("config")
    defaults.pop("config", None)
    assert from_file == defaults
    assert set(yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())) == set(defaults.keys())


def test_print_config_prints_the_resolved_yaml(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--max_epochs", "3", "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["max_epochs"] == 3 and printed["accelerator"] == "auto"


def test_help_lists_model_data_and_trainer_options(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    out = capsys.readouterr().out
    for flag in ("--lr", "--batch_size", "--accelerator", "--precision", "--max_epochs", "--print_config"):
        assert flag in out


def test_a_bad_flag_exits_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--max_epochs", "many"])
    assert exit_info.value.code == 2
    assert "max_epochs" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_gpu_without_a_gpu_is_one_clear_paragraph(tmp_path, capsys):
    output_dir = tmp_path / "run"
    code = main(["--accelerator", "gpu", "--devices", "1", "--output_dir", str(output_dir)])
    err = one_line(capsys.readouterr().err)
    assert code == 2
    assert err.startswith("Error: --accelerator gpu asks for a GPU, but none can be used")
    assert "--accelerator cpu" in err and "Traceback" not in err
    assert not output_dir.exists()


def test_script_is_a_thin_wrapper(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train.py", "--print_config"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    assert exit_info.value.code == 0
    assert "max_epochs: 12" in capsys.readouterr().out
