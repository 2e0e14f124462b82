"""A user's mistake ends in one clear paragraph and a non-zero exit, never a traceback, and writes nothing."""

import gzip
import importlib.util
import os
import re

import pytest
import torch
from helpers import TINY_RUN, one_line
from torchvision.datasets import MNIST

from mnist_lightning.core.cli import build_parser, parse_args
from mnist_lightning.core.train import main

# (flags, exit status, phrases the message must contain)
BAD_FLAGS = [
    (["--devices", "0"], 2, ["Trainer settings are not valid", "--devices takes a"]),
    # -1 (every GPU) is not valid on the CPU: the hint says what is
    (["--devices", "-1", "--accelerator", "cpu"], 2, ["an int > 0. On the CPU, --devices takes a number of processes"]),
    (["--accelerator", "gpux"], 2, ["Trainer settings are not valid", "--accelerator takes cpu, gpu"]),
    (["--max_time", "soon"], 2, ["--max_time soon is not a duration", "00:01:30:00"]),
    (["--max_time", "00:00:00:00", "--quiet", "false"], 2, ["--max_time 00:00:00:00 trains nothing"]),
    (["--limit_train_batches", "1.5", "--quiet", "false"], 2, ["--limit_train_batches 1.5 is out of range"]),
    (["--lr", "inf"], 2, ["--lr inf is not a finite number"]),
    # --batch_size is linked into the data module; its own batch_size would be silently replaced.
    (["--data.batch_size", "7"], 2, ["--data.batch_size: the batch size is the top-level --batch_size"]),
    # float32's largest: Adam could not apply it
    (["--lr", "1e38"], 2, ["--lr 1e+38 is out of range: it must be above 0 and at most 3.4e37."]),
    # argparse reads -inf as an option: the flag would get no value
    (["--lr", "-inf"], 2, ["--lr -inf: a value that starts with '-' is read as an option; write it --lr=-inf."]),
    (["--momentum", "-1"], 2, ["--momentum -1.0 is out of range: it must be at least 0 and below 1."]),
    (["--momentum", "1.5"], 2, ["--momentum 1.5 is out of range"]),  # SGD's velocity would grow without end
    (["--weight_decay", "-1"], 2, ["--weight_decay -1.0 is out of range: it must be at least 0."]),
    (["--logger", "foo"], 2, ["--logger foo is not csv, tensorboard, true, false or the class path of a Logger"]),
    (["--max_epochs", "-1"], 2, ["--max_epochs -1 trains without end", "--lr_schedule constant"]),
    (["--min_epochs", "5"], 2, ["--min_epochs 5 is above --max_epochs 2"]),
    (["--precision", "16-true", "--lr", "1e6"], 2, ["--lr 1000000.0 does not fit the 16-bit weights", "65504"]),
    # Found before training, not by Lightning's loop (a ZeroDivisionError) or after an epoch.
    (["--val_check_interval", "0"], 2, ["--val_check_interval 0 is out of range", "above 0.0"]),
    (["--val_check_interval", "nan"], 2, ["Invalid time format for `val_check_interval`"]),
    (["--val_check_interval", "1.5"], 2, ["--val_check_interval 1.5 is out of range", "(up to 1.0)"]),  # not Trainer's
    (["--num_nodes", "2"], 2, ["--num_nodes 2 needs one process per machine, started by torchrun or srun"]),
    (["--val_check_interval", "50"], 2, ["`val_check_interval` (50) must be less than or equal to", "batches (10)"]),
    (
        ["--callbacks+=EarlyStopping", "--callbacks.monitor=val_acc"],
        2,
        ["monitors 'val_acc'", "did you mean 'val/acc'"],
    ),
    (["--net", "helpers.NoWeights"], 2, ["the network NoWeights has no trainable parameters"]),
    (["--logger", "WandbLogger", "--logger.project", "mnist"], 2, ["Requirement 'wandb", "pip install", "Install"]),
    # Only the data module knows how many batches there are: Lightning says it once the loaders exist (after its
    # banners), as one paragraph too (test_a_fraction_that_leaves_no_batch_is_one_paragraph_after_the_banners).
    (["--limit_train_batches", "0.00001", "--quiet", "false"], 2, ["check 1e-05 of the `train_dataloader`"]),
    (
        ["--limit_val_batches", "0.001"],
        2,
        ["check 0.001 of the `val_dataloader`", "Try at least `limit_val_batches=0.5`"],
    ),
    (
        ["--net", "torch.nn.Identity"],
        2,
        ["maps a batch of samples of shape [2, 1, 28, 28] to [2, 1, 28, 28]", "[2, 10]"],
    ),
    (
        ["--net", "torch.nn.Flatten"],
        2,
        [
            "the network Flatten cannot take a batch of samples of shape [2, 1, 28, 28]",
            "--net was built as torch.nn.Flatten((1, 28, 28), 10",
            "takes the shape of one sample and the number of classes as its first two arguments",
        ],
    ),
    (
        ["--net", "helpers.SmallCNN", "--net.channels", "-1"],
        2,
        ["--net helpers.SmallCNN could not be built", "negative dimension", "--net.NAME VALUE"],
    ),
    (
        ["--net", "torch.nn.Linear", "--net.in_features", "-1", "--net.out_features", "10"],
        2,
        ["--net.in_features is not an option", "torch.nn.Linear (in_features, out_features) are given by the data"],
    ),
    (["--net.num_classes", "3"], 2, ["--net.num_classes is not an option", "given by the data module (--data)"]),
    (["--net", "helpers.SmallCNN", "--net.width", "3"], 2, ["--net.width is not an argument", "takes --net.channels"]),
    (
        ["--net.channels", "4", "--net", "helpers.SmallCNN"],
        2,
        ["--net.channels is not an argument of", "Give --net CLASS before its --net.NAME flags."],
    ),
    (["--devices", "-3"], 2, ["Trainer settings are not valid", "should be an int"]),
    (["--devices", "abc"], 2, ["Trainer settings are not valid"]),
    (["--accelerator", "tpux"], 2, ["invalid accelerator name", "cpu"]),
    (["--strategy", "nonsense"], 2, ["invalid strategy name", "ddp"]),
    (["--precision", "12"], 2, ["precision"]),
    (["--batch_size", "0"], 2, ["--batch_size 0 is out of range: it must be at least 1"]),
    # Larger than Python's index type takes: the DataLoader's islice failed with a traceback.
    (["--batch_size", "99999999999999999999999"], 2, ["99999999999999999999999 is out of range: it must be at least"]),
    (["--batch_size", "1e9"], 2, ["--batch_size 1e9 is not a whole number as written: write 1000000000."]),
    (["--max_epochs", "1e2"], 2, ["--max_epochs 1e2 is not a whole number as written: write 100."]),
    (["--seed", "2.5"], 2, ["--seed 2.5 is not a whole number. Run"]),
    (["--lr", "-1"], 2, ["--lr -1.0 is out of range: it must be above 0 and at most 3.4e37."]),
    # Floats above 2**53 hold no exact digits of what was written: no digits to suggest
    (["--batch_size", "1e30"], 2, ["--batch_size 1e30 is not a whole number as written: write it in digits."]),
    (["--seed", "1e30"], 2, ["--seed 1e+30 is not a whole number as written: write it in digits."]),
    (["--max_steps", "1e30"], 2, ["--max_steps 1e+30 is not a whole number as written: write it in digits."]),
    (
        ["--data.val_size", "70000"],
        2,
        ["val_size must be between 1 and 1199 for this dataset (it has 1200 training images), got 70000"],
    ),
    (["--max_epochs", "-5"], 2, ["--max_epochs -5 is out of range: it must be at least -1"]),
    (["--optimizer", "rmsprop"], 2, ["optimizer", "adam", "sgd"]),
    (["--data.dataset", "svhn"], 2, ["--data.dataset svhn is not one of the choices: mnist, fashion_mnist, kmnist"]),
    (["--data.val_size", "abc"], 2, ["--data.val_size abc is not a whole number"]),
    (["--data.val_size", "0"], 2, ["--data.val_size 0 is out of range: it must be at least 1."]),
    (["--data.valsize", "9"], 2, ["--data.valsize is not an argument of", "it takes --data.data_dir"]),
    (["--data", "torch.nn.Linear"], 2, ["--data torch.nn.Linear is not a LightningDataModule"]),
    (["--data", "nowhere.Data"], 2, ["--data nowhere.Data cannot be built: No module named 'nowhere'"]),
    (["--data.num_workers", "10000"], 2, ["num_workers must be between 0 and", "this machine's cores", "got 10000"]),
    (["--net", "helpers.SmallCNN", "--net.channels", "x"], 2, ["--net.channels x is not a whole number."]),
    (["--net", "torch.nn.Nonexistent"], 2, ["--net torch.nn.Nonexistent cannot be built", "has no attribute"]),
    (
        ["--net", "torch.nn.Linear"],
        2,
        ["--net torch.nn.Linear could not be built for the data", "shape of one sample and the number of classes"],
    ),
    (["--config", "missing.yaml"], 2, ["missing.yaml", "does not exist"]),
    (["--seed", "-1"], 2, ["--seed -1 is out of range: it must be between 0 and 4294967295"]),
    (["--accumulate_grad_batches", "0"], 2, ["--accumulate_grad_batches 0 is out of range: it must be at least 1"]),
    (["--check_val_every_n_epoch", "0"], 2, ["--check_val_every_n_epoch 0 is out of range"]),
    # (killed during its imports: no folder, no record) what to do then
    (["--ckpt_path", "last"], 2, ["resumes the run", "does not exist", "run its own command again, without --ckpt"]),
    (["--device", "cpu"], 2, ["--device is not an option; did you mean --devices?"]),  # plain PyTorch scripts' flag
    (["--quiet"], 2, ["--quiet needs a value after it (a yes/no option takes true or false: --quiet true)."]),
    (["--deterministic", "--quiet", "true"], 2, ["--deterministic needs a value after it"]),
    (["--limit", "1"], 2, ["did you mean --limit_train_batches, --limit_val_batches, --limit_test_batches or"]),
]


def run(fake_mnist, output_dir, *flags) -> int:
    return main(["--data.data_dir", str(fake_mnist), "--output_dir", str(output_dir), *TINY_RUN, *flags])


def assert_clean_failure(capsys, code, expected_code, phrases, output_dir):
    captured = capsys.readouterr()
    message = one_line(captured.err)
    assert code == expected_code, message
    assert "Traceback" not in captured.err + captured.out
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    assert not output_dir.exists() or not any(output_dir.iterdir())


@pytest.mark.parametrize(("flags", "expected_code", "phrases"), BAD_FLAGS, ids=[" ".join(f) for f, _, _ in BAD_FLAGS])
def test_bad_flags(fake_mnist, tmp_path, capsys, monkeypatch, flags, expected_code, phrases):
    monkeypatch.chdir(tmp_path)
    try:
        code = run(fake_mnist, tmp_path / "run", *flags)
    except SystemExit as exit_info:  # the parser's own errors (argparse convention: exit status 2)
        code = exit_info.code
    assert_clean_failure(capsys, code, expected_code, phrases, tmp_path / "run")


@pytest.mark.parametrize(
    ("config_text", "phrases"),
    [
        ("max_epochs: 3\nlr: 0.1\nmax_epochs: 5\n", ["bad.yaml, line 3, column 1: max_epochs is set twice"]),
        ("max_epochs: [1,\n", ["bad.yaml, line 2", "not valid YAML"]),
        ("max_epochs: 2\nbatchsize: 10\n", ["bad.yaml", "do not exist: batchsize (did you mean batch_size?)"]),
        ("", ["bad.yaml holds no options", "--print_config"]),
        ("# max_epochs: 3\n", ["bad.yaml holds no options"]),
        ("- max_epochs\n- 3\n", ["bad.yaml holds a list"]),
        ("\xff\xfe", ["bad.yaml is not a text file"]),
        ("data:\n  init_args:\n    batch_size: 3\n", ["batch_size under data: init_args:", "top-level --batch_size"]),
        (
            "trainer:\n  max_epochs: 3\nmodel:\n  lr: 0.1\n",
            ["LightningCLI's sections", "every option at the top level"],
        ),
        ("learning_rate: 0.1\n", ["learning_rate (did you mean lr?)"]),
    ],
    ids=[
        *("duplicate key", "malformed", "unknown key", "empty", "comments only", "a list", "binary"),
        *("data batch_size", "LightningCLI layout", "a synonym"),
    ],
)
def test_bad_config_files(fake_mnist, tmp_path, capsys, config_text, phrases):
    (tmp_path / "bad.yaml").write_bytes(config_text.encode("latin-1"))
    code = run(fake_mnist, tmp_path / "run", "--config", str(tmp_path / "bad.yaml"))
    assert_clean_failure(capsys, code, 2, phrases, tmp_path / "run")
    assert "usage:" not in capsys.readouterr().err


def assert_one_paragraph(capsys, code, phrase):
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("Error:") and err.count("Error:") == 1 and "\n\n" not in err.strip(), err
    assert phrase in one_line(err), (phrase, one_line(err))


# A value a config file sets is named as the file writes it, with the file: the user typed no flag. A flag typed
# wins over the file (the last two), so the message is then about the flag.
@pytest.mark.parametrize(
    ("config_text", "flags", "phrase"),
    [
        ("max_epochs: two\n", [], "Error: max_epochs: two in the config file {file} is not a whole number."),
        ("max_epochs: -5\n", [], "Error: max_epochs: -5 in the config file {file} is out of range: it must be at"),
        ("seed: -1\n", [], "Error: seed: -1 in the config file {file} is out of range"),
        (
            "data:\n  init_args:\n    val_size: abc\n",
            [],
            "Error: data: init_args: val_size: abc in the config file {file} is not a whole number.",
        ),
        (
            "data:\n  val_size: abc\n",
            [],
            "Error: data: val_size: abc in the config file {file} is not a whole number.",
        ),
        (
            "net:\n  class_path: helpers.SmallCNN\n  channels: 4\n",
            [],
            "Error: The arguments of --net in a config file go under init_args: (`net: ",
        ),
        ("seed: -1\n", ["--seed", "-1"], "Error: --seed -1 is out of range"),
        ("max_epochs: 3\n", ["--max_epochs", "two"], "Error: --max_epochs two is not a whole number."),
        (
            "seed: 1e3\n",
            [],
            "Error: seed: 1000.0 in the config file {file} is not a whole number as written: write 1000.",
        ),
        # The model's and the data module's own bounds, checked as the file is parsed
        ("lr: .nan\n", [], "Error: lr: nan in the config file {file} is not a finite number."),
        ("lr: 1e39\n", [], "Error: lr: 1e+39 in the config file {file} is out of range: it must be above 0 and"),
        ("weight_decay: .inf\n", [], "Error: weight_decay: inf in the config file {file} is not a finite number."),
        ("momentum: 1\n", ["--lr", "0.1"], "Error: momentum: 1.0 in the config file {file} is out of range"),
        ("data:\n  val_size: 0\n", [], "Error: data: val_size: 0 in the config file {file} is out of range"),
        # A value that is no scalar, with a good one typed for the same option
        ("max_epochs: [1, 2]\n", ["--max_epochs", "3"], "Error: max_epochs: [1, 2] in the config file {file} is not"),
    ],
    ids=[
        *("parsed", "range", "seed range", "data init_args", "data", "beside class_path", "flag and file"),
        *("flag over file", "exponent"),
        *("nan", "above float32", "inf", "momentum", "data bound", "a list"),
    ],
)
def test_a_bad_value_in_a_config_file_names_the_file(tmp_path, capsys, config_text, flags, phrase):
    (tmp_path / "mine.yaml").write_text(config_text)
    code = main(["--config", str(tmp_path / "mine.yaml"), "--output_dir", str(tmp_path / "run"), *flags])
    assert_one_paragraph(capsys, code, phrase.format(file=tmp_path / "mine.yaml"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("edit", "flags"),
    [("max_epochs: two", []), ("max_epochs: two", ["--max_epochs", "4"]), ("seed: -1", [])],
    ids=["parsed", "parsed, max_epochs typed", "range"],
)
def test_a_bad_value_in_a_resumed_runs_record_names_the_record(tmp_path, capsys, edit, flags):
    # The record as a run writes it (parsing fails before its checkpoints are looked for), then edited by hand.
    record = build_parser().dump(parse_args(TINY_RUN), skip_none=False)  # as a run writes it
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(re.sub(rf"^{edit.split(':')[0]}: .*$", edit, record, flags=re.M))
    code = main(["--output_dir", str(tmp_path / "run"), "--ckpt_path", "last", *flags])
    assert_one_paragraph(capsys, code, f"Error: {edit} in the config file {tmp_path / 'run' / 'config.yaml'} is")


@pytest.mark.parametrize(
    "flags",
    [["--max_epochs", "0"], ["--limit_train_batches", "0"], ["--max_steps", "0"], ["--max_time", "00:00:00:00"]],
    ids=["max_epochs", "limit_train_batches", "max_steps", "max_time"],
)
def test_settings_that_train_nothing_report_no_accuracy(fake_mnist, tmp_path, capsys, flags):
    code = run(fake_mnist, tmp_path / "run", *flags)
    captured = capsys.readouterr()
    assert "Test accuracy" not in captured.out
    message = one_line(captured.err)
    assert code == 2 and "no trained model to test" in message and "Traceback" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("flag", "fraction", "least"), [("limit_train_batches", "0.00001", "0.1"), ("limit_val_batches", "0.001", "0.5")]
)
def test_a_fraction_that_leaves_no_batch_is_one_paragraph_after_the_banners(
    fake_mnist, tmp_path, capfd, flag, fraction, least
):
    # The data module alone knows its number of batches (10 to train, 2 to validate here), so Lightning says it once
    # its loaders exist: after its banners, as the last paragraph, and no run folder is left.
    assert run(fake_mnist, tmp_path / "run", f"--{flag}", fraction, "--quiet", "false") == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    message = err[err.index("Error:") :].strip()
    assert "\n\n" not in message and "Error:" not in message[1:], message
    assert f"Please increase the `{flag}` argument. Try at least `{flag}={least}`" in one_line(message)
    assert not (tmp_path / "run").exists()


def test_a_data_mistake_is_reported_before_lightnings_banners(fake_mnist, tmp_path, capfd):
    assert run(fake_mnist, tmp_path / "run", "--data.val_size", "5000", "--quiet", "false") == 2
    err = capfd.readouterr().err
    assert err.startswith("Error: --data.val_size must be between 1 and 1199") and "GPU available" not in err


@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_more_cpu_processes_than_cores_are_refused(fake_mnist, tmp_path, capsys, accelerator):
    if accelerator == "auto" and (torch.cuda.is_available() or torch.backends.mps.is_available()):
        pytest.skip("auto picks the GPU here")
    flags = ["--accelerator", accelerator, "--devices", str(os.cpu_count() + 1), "--strategy", "ddp"]
    assert run(fake_mnist, tmp_path / "run", *flags) == 2
    assert f"this machine has {os.cpu_count()} cores" in one_line(capsys.readouterr().err)


def test_missing_mnist_without_network_names_the_folder_and_files(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", [])  # as offline: every download attempt fails
    code = main(["--data.data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run"), *TINY_RUN])
    message = one_line(capsys.readouterr().err)
    assert code == 1
    assert str((tmp_path / "data" / "MNIST" / "raw").resolve()) in message
    assert not message.endswith("What went wrong:") and not (tmp_path / "data").exists()  # no empty folders left
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert name in message
    assert not (tmp_path / "run").exists()


def test_a_damaged_mnist_file_is_refused_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", [])
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"not MNIST"))
    code = main(["--data.data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run"), *TINY_RUN])
    message = one_line(capsys.readouterr().err)
    assert code == 1 and "train-labels-idx1-ubyte.gz is damaged" in message and "MD5" in message
    assert not (tmp_path / "run").exists()


def test_an_output_folder_that_cannot_be_written(fake_mnist, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    code = run(fake_mnist, tmp_path / "a_file" / "run")
    assert code == 2 and "cannot be written" in one_line(capsys.readouterr().err)


def test_a_checkpoint_of_another_model_is_refused(tmp_path, capsys):
    from mnist_lightning.core.evaluate import main as evaluate_main

    other = {"hyper_parameters": {}, "state_dict": {"net.linear.weight": torch.zeros(3, 3)}, "epoch": 0}
    torch.save(other, tmp_path / "other.ckpt")
    assert evaluate_main(["--ckpt_path", str(tmp_path / "other.ckpt"), "--output_dir", str(tmp_path / "e")]) == 2
    assert "is a PyTorch file but not a checkpoint written by scripts/train.py" in one_line(capsys.readouterr().err)


def test_more_gpus_than_the_machine_has(monkeypatch):
    from mnist_lightning.core.devices import check_accelerator
    from mnist_lightning.core.errors import UserError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match="asks for 4 GPUs, but this machine has 1"):
        check_accelerator("gpu", "4")
    check_accelerator("gpu", "1")  # enough: no error


def another_programs_files(folder) -> dict[str, object]:
    """What users pass as --ckpt_path by mistake: name -> path."""
    (folder / "empty.ckpt").write_bytes(b"")
    (folder / "notes.ckpt").write_text("epoch: 3\nthis is not a checkpoint\n")
    torch.save({"weights": torch.zeros(3)}, folder / "a_dict.ckpt")
    other_model = {
        "state_dict": {"encoder.weight": torch.zeros(4, 4)},
        "hyper_parameters": {"hidden": 4},
        "datamodule_hyper_parameters": {"_class_path": "mnist_lightning.datamodule.MNISTDataModule"},
        "epoch": 2,
        "pytorch-lightning_version": "2.6.0",
    }
    torch.save(other_model, folder / "other_model.ckpt")
    torch.save(torch.nn.Linear(2, 2), folder / "module.ckpt")  # a pickled object: loading it could run code
    # A Lightning checkpoint of another program: no record of the data module that train.py keeps in every one.
    torch.save({key: value for key, value in other_model.items() if "datamodule" not in key}, folder / "foreign.ckpt")
    return {
        "missing": (folder / "missing.ckpt", "no such file"),
        "folder": (folder, "is a folder"),
        "best": (
            "best",
            "no such file; --ckpt_path takes a checkpoint file. A run's best weights are in <run>/checkpo",
        ),
        "empty": (folder / "empty.ckpt", "is not a PyTorch checkpoint, or it is damaged (0 bytes; "),
        "text": (folder / "notes.ckpt", "is not a PyTorch checkpoint"),
        "a dict": (folder / "a_dict.ckpt", "not a checkpoint written by scripts/train.py"),
        "another model": (folder / "other_model.ckpt", "weights of another network"),
        "foreign": (folder / "foreign.ckpt", "not a checkpoint written by scripts/train.py"),
        "object": (folder / "module.ckpt", "holds objects other than tensors and plain values, not loaded as that"),
    }


@pytest.mark.parametrize(
    "kind", ["missing", "folder", "best", "empty", "text", "a dict", "another model", "foreign", "object"]
)
def test_anything_but_a_good_checkpoint_is_refused_by_train(fake_mnist, tmp_path, capsys, kind):
    path, phrase = another_programs_files(tmp_path)[kind]
    code = run(fake_mnist, tmp_path / "run", "--ckpt_path", str(path))
    assert_clean_failure(capsys, code, 2, [phrase], tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_refused_by_the_unpickler_gets_no_advice_to_unpickle(fake_mnist, tmp_path, capsys):
    (tmp_path / "pickle.ckpt").write_bytes(b"\x80\x04\x95" + b"not really" * 10)
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.ckpt")  # torch's refusal suggests weights_only=False
    for name in ("pickle.ckpt", "module.ckpt"):
        assert run(fake_mnist, tmp_path / "run", "--ckpt_path", str(tmp_path / name)) == 2
        assert "weights_only=False" not in capsys.readouterr().err


def test_evaluate_reports_a_bad_command_line_in_one_paragraph(capsys):
    from mnist_lightning.core.evaluate import main as evaluate_main

    assert evaluate_main(["--batch_size", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: --batch_size abc is not a whole number") and "usage:" not in err


def test_export_into_an_existing_file_is_refused_before_any_work(tmp_path, capsys):
    from mnist_lightning.core.export import main as export_main

    (tmp_path / "a_file").write_text("")
    assert export_main(["--ckpt_path", str(tmp_path / "x.ckpt"), "--output_dir", str(tmp_path / "a_file")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "a_file cannot be written" in err and "is not a folder" in err and "Traceback" not in err
    assert "Pass another --output_dir" in err


def test_print_config_checks_the_values_it_prints(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--batch_size", "64", "--print_config"])
    assert stop.value.code == 0 and "batch_size: 64" in capsys.readouterr().out
    assert main(["--batch_size", "0", "--print_config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--batch_size 0 is out of range" in one_line(captured.err)
    # The data module's own checks, as it is built.
    assert main(["--data.val_size", "0", "--print_config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--data.val_size 0 is out of range: it must be at least 1." in one_line(captured.err)


def test_a_networks_warnings_are_shown_only_when_the_network_is_accepted(fake_mnist, tmp_path, capsys, recwarn):
    # torch warns "Initializing zero-element tensors is a no-op" as it builds nn.Conv2d(1, 0, 3): noise above the
    # message that refuses the network.
    code = run(fake_mnist, tmp_path / "refused", "--net", "helpers.SmallCNN", "--net.channels", "0")
    refusal = ["the network SmallCNN cannot take a batch of samples of shape [2, 1, 28, 28]"]
    assert_clean_failure(capsys, code, 2, refusal, tmp_path / "refused")
    assert not [warning for warning in recwarn if "zero-element" in str(warning.message)]

    assert run(fake_mnist, tmp_path / "accepted", "--net", "helpers.CautiousNN", "--max_epochs", "1") == 0
    assert [warning for warning in recwarn if "a note from the network's author" in str(warning.message)]


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
def test_an_accelerator_whose_package_is_missing_is_one_message(fake_mnist, tmp_path, capsys):
    # Lightning knows "tpu" but needs torch_xla for it, and raises an ImportError as it builds the accelerator.
    code = run(fake_mnist, tmp_path / "run", "--accelerator", "tpu")
    assert_clean_failure(capsys, code, 2, ["need a package that is not installed", "torch_xla"], tmp_path / "run")


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
    assert "--batch_size 0 is out of range: it must be at least 1" in one_line(capsys.readouterr().err)


def test_a_whole_batch_size_written_with_an_exponent_in_a_config_file_is_taken(tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text("batch_size: 1e3\n")
    with pytest.raises(SystemExit) as stop:
        main(["--config", str(tmp_path / "mine.yaml"), "--print_config"])
    assert stop.value.code == 0 and "\nbatch_size: 1000\n" in capsys.readouterr().out
