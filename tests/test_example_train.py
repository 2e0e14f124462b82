"""The example's training runs (MNIST's data module, SimpleNN and the Classifier), on the small fake MNIST: what the
example adds to the machinery (its cosine schedule, stretched on a resume; its optimizers; --compile; its quiet data
loading on machines with many cores), its command line (its options' help, the shipped configs/ that name them). The
machinery itself is tested on the tests' own task: tests/test_train.py, test_resume.py, test_cli.py."""

import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import example
import pytest
import torch
import yaml
from helpers import ROOT, TINY_RUN, one_line
from jsonargparse import Namespace
from lightning.pytorch import Trainer

from mnist_lightning.core.cli import build_parser, parse_args
from mnist_lightning.core.train import main

pytestmark = [example.data, example.task]
STEPS = 10  # an epoch of the fake MNIST's 1,000 training images in TINY_RUN's batches of 100


def flags(fake_mnist, output_dir, *more) -> list[str]:
    return ["--data.data_dir", str(fake_mnist), "--output_dir", str(output_dir), *TINY_RUN, *more]


@pytest.fixture(scope="module")
def finished(fake_mnist, tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(flags(fake_mnist, run)) == 0
    return run


def test_the_example_learns_the_fake_digits_and_tests_its_best_epoch(finished):
    metrics = json.loads((finished / "metrics.json").read_text())
    assert metrics["test/acc"] > 0.9  # each class lights its own patch: easy to learn
    best = max(metrics["history"], key=lambda row: row["val/acc"])
    assert metrics["best_checkpoint"].endswith(f"best-epoch{best['epoch']:02d}-acc{best['val/acc']:.4f}.ckpt")
    assert metrics["best_val/acc"] == pytest.approx(best["val/acc"])


def test_a_normal_run_of_the_example_on_many_cores_prints_nothing_that_looks_like_an_error(
    fake_mnist, tmp_path, capfd, monkeypatch
):
    """Lightning's warnings that count cores (num_workers) show on big machines only: the example's data module,
    which reads from memory, answers them. (The rest of a normal run's output: tests/test_train.py.)"""
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    with warnings.catch_warnings(record=True) as shown:  # what a terminal would show (pytest keeps them)
        warnings.simplefilter("always")
        assert main(flags(fake_mnist, tmp_path / "run")) == 0
    hidden = (DeprecationWarning, PendingDeprecationWarning)  # Python's defaults hide these, from libraries
    assert not [str(w.message) for w in shown if not issubclass(w.category, hidden)]
    err = capfd.readouterr().err.lower()
    for word in ("warning", "error", "traceback", "deprecat", "leak", "exists and is not empty", "tip:"):
        assert word not in err, err


def test_a_longer_max_epochs_extends_the_cosine_schedule(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    assert main(["--output_dir", str(run), "--ckpt_path", "last", "--max_epochs", "4"]) == 0
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    (schedule,) = last["lr_schedulers"]
    assert schedule["T_max"] == 4 * STEPS and schedule["last_epoch"] == 4 * STEPS
    # The learning rate of each resumed step is the cosine of a run planned for 4 epochs; it never climbs back.
    rows = [line.split(",") for line in (run / "logs" / "version_1" / "metrics.csv").read_text().splitlines()]
    column = rows[0].index("lr-Adam")
    values = [float(row[column]) for row in rows[1:] if row[column]]
    assert values and values == sorted(values, reverse=True)
    assert values[0] <= 0.02 * (1 + math.cos(math.pi * 0.5)) / 2 + 1e-9  # from half-way on: epoch 2 of 4


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_diverged_run_of_either_optimizer_stops_with_a_message(fake_mnist, tmp_path, capsys, optimizer):
    run = tmp_path / "run"
    # The largest --lr taken: each optimizer's arithmetic must hold it (Adam's first step is lr / 0.1).
    diverging = ["--optimizer", optimizer, "--lr", "3.4e37", "--weight_decay", "10", "--lr_schedule", "constant"]
    code = main(flags(fake_mnist, run, *diverging))
    message = one_line(capsys.readouterr().err)
    assert code == 1 and "Training diverged" in message and "use a smaller learning rate" in message, message
    assert not run.exists()  # it diverged in its first epoch: no checkpoint, so no folder is left


def test_a_run_records_the_examples_options(fake_mnist, tmp_path):
    run = tmp_path / "run"
    options = ["--lr", "0.05", "--optimizer", "sgd", "--lr_schedule", "constant", "--max_epochs", "1"]
    assert main(flags(fake_mnist, run, *options)) == 0
    record = yaml.safe_load((run / "config.yaml").read_text())
    chosen = (record["lr"], record["optimizer"], record["lr_schedule"], record["batch_size"])
    assert chosen == (0.05, "sgd", "constant", 100)
    assert record["data"]["class_path"] == "mnist_lightning.datamodule.MNISTDataModule"
    assert record["data"]["init_args"]["data_dir"] == str(fake_mnist)
    assert record["net"]["class_path"] == "mnist_lightning.model.SimpleNN"
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert "momentum_buffer" in last["optimizer_states"][0]["state"][0]  # SGD's, with momentum
    assert not last["lr_schedulers"]


def test_print_config_names_the_examples_classes(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["net"]["class_path"] == "mnist_lightning.model.SimpleNN"
    assert printed["data"]["class_path"] == "mnist_lightning.datamodule.MNISTDataModule"


def test_the_examples_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--optimizer", "--momentum", "--weight_decay", "--lr_schedule", "--compile"):
        assert flag in out
    # The example's classes' docstrings are plain text (Lightning's Trainer's are Lightning's own).
    assert "``adam``" not in out and "``input_shape``" not in out
    with pytest.raises(SystemExit):
        parse_args(["--data.help", "MNISTDataModule"])
    page = capsys.readouterr().out
    for flag in ("--data.dataset", "--data.val_size", "--data.data_dir", "--data.num_workers"):
        assert flag in page
    assert "``" not in page


def holds(parsed, value) -> bool:
    """Whether ``parsed`` has every setting of ``value``, in nested mappings too (class_path, init_args)."""
    if isinstance(value, dict):
        return isinstance(parsed, dict) and all(key in parsed and holds(parsed[key], value[key]) for key in value)
    return parsed == value


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_each_shipped_config_parses_and_holds_only_real_choices(name):
    """configs/ holds the template's own choices: every key parses, and none merely repeats a default."""
    defaults = build_parser().get_defaults()
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


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the note is about a machine without a usable GPU")
def test_a_compiled_cpu_run_prints_nothing_that_looks_like_an_error(fake_mnist, tmp_path):
    # A CUDA toolkit (here CUDA_HOME) on a machine with no GPU makes torch's compiler log "No CUDA runtime is
    # found" at WARNING level. With its own empty compilation cache, as a first run on a new machine.
    env = os.environ | {"CUDA_HOME": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "mnist_lightning.core.train", *flags(fake_mnist, tmp_path / "run")]
    command += ["--compile", "true"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    err = result.stderr.lower()
    for word in ("warning", "error", "traceback", "no cuda runtime"):
        assert word not in err, result.stderr
    assert not re.search(r"^[WE]\d{4} ", result.stderr, flags=re.MULTILINE), result.stderr  # torch's log lines
