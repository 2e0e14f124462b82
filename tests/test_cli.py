"""scripts/train.py's command line (cli.py): flags, config files, the run record, --help and clear errors."""

import inspect
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_RUN, one_line
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor

from mnist_lightning.core.callbacks import StopTogether
from mnist_lightning.core.checkpoints import load_checkpoint
from mnist_lightning.core.cli import build_parser, build_training, parse_args
from mnist_lightning.core.train import main, train

ROOT = Path(__file__).resolve().parents[1]


def holds(parsed, value) -> bool:
    """Whether ``parsed`` has every setting of ``value``, in nested mappings too (class_path, init_args)."""
    if isinstance(value, dict):
        return isinstance(parsed, dict) and all(key in parsed and holds(parsed[key], value[key]) for key in value)
    return parsed == value


def tiny(data_dir, output_dir, *flags) -> list[str]:
    return [
        "--data.data_dir",
        str(data_dir),
        "--output_dir",
        str(output_dir),
        *TINY_RUN,
        "--accelerator",
        "cpu",
        *flags,
    ]


def test_accelerator_and_devices_are_top_level_flags():
    config = parse_args(["--accelerator", "cpu", "--devices", "1"])
    # Trainer types devices as list[int] | str | int, so the flag arrives as "1", which Lightning reads as 1.
    assert (config.accelerator, str(config.devices)) == ("cpu", "1")


def test_every_trainer_argument_is_a_flag():
    keys = set(build_parser().get_defaults().keys())
    trainer_args = set(inspect.signature(Trainer.__init__).parameters) - {"self", "default_root_dir"}
    assert trainer_args <= keys


def test_config_file_then_flags_override_it(tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("max_epochs: 7\nlr: 0.1\nbatch_size: 32\n")
    config = parse_args(["--config", str(config_file), "--lr", "0.3"])
    assert (config.max_epochs, config.lr, config.batch_size) == (7, 0.3, 32)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_each_shipped_config_parses_and_holds_only_real_choices(name):
    """configs/ holds the template's own choices: every key parses, and none merely repeats a default."""
    parser = build_parser()
    defaults = parser.get_defaults()
    settings = yaml.safe_load((ROOT / "configs" / name).read_text())
    config = parse_args(["--config", str(ROOT / "configs" / name)])
    for key, value in settings.items():
        parsed = config[key].as_dict() if isinstance(config[key], Namespace) else config[key]
        assert holds(parsed, value), (key, parsed, value)
        if name != "default.yaml":
            assert defaults[key] != value, f"{name}: {key} repeats the default"


def test_default_yaml_states_the_templates_defaults():
    defaults = parse_args([])
    from_file = parse_args(["--config", str(ROOT / "configs" / "default.yaml")])
    from_file.pop("config")
    defaults.pop("config", None)
    assert from_file == defaults, (
        "configs/default.yaml states the defaults, which live in the code (TRAINER_DEFAULTS in core/cli.py, the "
        "classes' signatures): change them there too, or keep your settings in a config of your own (--config)"
    )
    from_file = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    lightning_defaults = {name: p.default for name, p in inspect.signature(Trainer.__init__).parameters.items()}
    changed = {key for key in from_file if key in lightning_defaults and lightning_defaults[key] != from_file[key]}
    assert changed == {"max_epochs", "devices", "log_every_n_steps"}  # the Trainer settings the template changes


def test_callbacks_by_class_path_are_built_and_the_learning_rate_is_logged(fake_mnist, tmp_path):
    flags = tiny(fake_mnist, tmp_path / "run", "--callbacks+=EarlyStopping", "--callbacks.monitor=val/acc")
    training = build_training(parse_args([*flags, "--callbacks.mode=max"]))
    kinds = {type(callback) for callback in training.trainer.callbacks}
    assert {EarlyStopping, LearningRateMonitor} <= kinds
    assert StopTogether not in kinds  # only a multi-process run needs it: Lightning calls every callback every step
    train(training)
    header = (tmp_path / "run" / "logs" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "lr-Adam" in header and "train/loss" in header


def test_print_config_prints_the_resolved_yaml(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--max_epochs", "3", "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["max_epochs"] == 3 and printed["accelerator"] == "auto"
    assert printed["net"]["class_path"] == "mnist_lightning.model.SimpleNN"


def test_help_is_readable_and_shows_the_true_defaults(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--lr", "--batch_size", "--accelerator", "--precision", "--max_epochs", "--net", "--data"):
        assert flag in out
    # The template's own classes' docstrings are plain text (Lightning's Trainer's are Lightning's own).
    assert "``adam``" not in out and "``input_shape``" not in out
    devices_help = one_line(out.split("\n  --devices DEVICES")[1].split("\n  --")[0])
    assert "default: 1)" in devices_help
    # The data module's own arguments are on its page, which --help names, as readable as --help itself.
    assert "--data.help CLASS_PATH" in one_line(out) and "The main advantage is" not in out
    with pytest.raises(SystemExit):
        parse_args(["--data.help", "MNISTDataModule"])
    page = capsys.readouterr().out
    for flag in ("--data.dataset", "--data.val_size", "--data.data_dir", "--data.num_workers"):
        assert flag in page
    assert "``" not in page


@pytest.mark.parametrize("entry", ["evaluate", "predict", "export"])
def test_every_option_of_the_other_entry_points_is_described_in_their_help(capsys, entry):
    from importlib import import_module

    with pytest.raises(SystemExit):
        import_module(f"mnist_lightning.core.{entry}").build_parser().parse_args(["--help"])
    out = capsys.readouterr().out.split("options:")[1]
    blocks = [re.sub(r"^(\S+)( [A-Z_]+)?", r"--\1", block.strip()) for block in out.split("\n  --")[1:]]
    undescribed = [block.split()[0] for block in blocks if block.split(maxsplit=1)[1].startswith("(type:")]
    assert not undescribed, undescribed


def test_an_unknown_option_is_the_parsers_message(capsys):
    assert main(["--learning_rate", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "--learning_rate" in err and "usage:" not in err
    assert main(["--max_epoch", "3"]) == 2  # never abbreviated silently
    assert "--max_epoch" in capsys.readouterr().err


def test_a_bad_flag_is_one_paragraph_without_a_usage_dump(capsys):
    assert main(["--max_epochs", "many"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error:") and "max_epochs" in err and "usage:" not in err and "Traceback" not in err


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
        monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # as `python scripts/x.py` does
        runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    assert exit_info.value.code == 0
    assert "max_epochs: 12" in capsys.readouterr().out


def test_a_run_records_its_resolved_configuration(fake_mnist, tmp_path):
    assert main(tiny(fake_mnist, tmp_path / "run", "--lr", "0.05", "--optimizer", "sgd")) == 0
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (record["lr"], record["optimizer"], record["max_epochs"], record["batch_size"]) == (0.05, "sgd", 2, 100)
    assert record["data"]["class_path"] == "mnist_lightning.datamodule.MNISTDataModule"
    assert record["data"]["init_args"]["data_dir"] == str(fake_mnist)
    assert record["net"]["class_path"] == "mnist_lightning.model.SimpleNN"
    assert record["output_dir"] is None and record["ckpt_path"] is None  # where a run lives is not what it is


def test_a_function_that_builds_the_network_is_recorded_by_its_import_path(fake_mnist, tmp_path):
    run = tmp_path / "run"
    assert main(tiny(fake_mnist, run, "--net", "helpers.linear_net", "--max_epochs", "1")) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["net"] == "helpers.linear_net"
    # In the checkpoint as a name, not as pickled code: it loads with weights_only and rebuilds the network.
    assert isinstance(load_checkpoint(run / "checkpoints" / "last.ckpt").model.net, torch.nn.Sequential)


def test_the_record_reproduces_the_run(fake_mnist, tmp_path):
    """--config runs/<run>/config.yaml trains the same run again: same weights, same test accuracy."""
    assert main(tiny(fake_mnist, tmp_path / "first", "--seed", "7", "--deterministic", "true")) == 0
    again = ["--config", str(tmp_path / "first" / "config.yaml"), "--output_dir", str(tmp_path / "again")]
    assert main(again) == 0
    first, second = (torch.load(tmp_path / run / "checkpoints" / "last.ckpt") for run in ("first", "again"))
    assert all(first["state_dict"][key].equal(second["state_dict"][key]) for key in first["state_dict"])
    metrics = [yaml.safe_load((tmp_path / run / "metrics.json").read_text()) for run in ("first", "again")]
    assert metrics[0]["test/acc"] == metrics[1]["test/acc"]


def test_resume_needs_only_the_run_folder(fake_mnist, tmp_path, capsys):
    """A run resumed with --output_dir and --ckpt_path last takes every other option from its config.yaml."""
    run = tmp_path / "run"
    assert main(tiny(fake_mnist, run, "--batch_size", "50", "--lr", "0.05")) == 0
    assert main([f"--output_dir={run}", "--ckpt_path=last", "--max_epochs", "3"]) == 0  # either form of a flag
    record = yaml.safe_load((run / "config.yaml").read_text())
    assert (record["batch_size"], record["lr"], record["max_epochs"]) == (50, 0.05, 3)
    metrics = yaml.safe_load((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == [0, 1, 2]


def test_resume_refuses_options_that_would_mix_two_configurations(fake_mnist, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(tiny(fake_mnist, run)) == 0
    capsys.readouterr()
    assert main(["--output_dir", str(run), "--ckpt_path", "last", "--lr", "0.5", "--batch_size", "7"]) == 2
    err = one_line(capsys.readouterr().err)  # the resume's own parser takes only what a resume may change
    assert "nrecognized arguments: --lr 0.5 --batch_size 7" in err and "Traceback" not in err  # 4.43: "Unrecognized"
