"""End-to-end runs on the small fake MNIST: the Lightning template and the plain-PyTorch reference."""

import json

import pytest
from conftest import TINY_RUN, one_line

from mnist_lightning import plain_pytorch
from mnist_lightning.train import main, parse_config, train

METRIC_KEYS = {"test/acc", "test/loss", "epochs", "fit_seconds", "accelerator", "devices", "history"}


def run_lightning(data_dir, output_dir, *flags):
    return train(parse_config(["--data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_RUN, *flags]))


def run_plain(data_dir, output_dir, *flags):
    args = ["--data_dir", str(data_dir), "--output_dir", str(output_dir), "--val_size", "200", "--batch_size", "100"]
    return plain_pytorch.train_plain(plain_pytorch.build_parser().parse_args([*args, "--max_epochs", "2", *flags]))


def test_train_fits_tests_and_writes_metrics(fake_mnist, tmp_path):
    metrics = run_lightning(fake_mnist, tmp_path / "run", "--accelerator", "cpu", "--devices", "1")
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert METRIC_KEYS <= written.keys()
    assert written["test/acc"] == metrics["test/acc"] > 0.9  # the fake digits are easy: it must learn them
    assert (written["epochs"], written["accelerator"], written["devices"]) == (2, "cpu", 1)
    assert [row["epoch"] for row in written["history"]] == [0, 1]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()
    assert metrics["best_checkpoint"].endswith(".ckpt")
    assert (tmp_path / "run" / "metrics.csv").exists()


def test_main_returns_zero_and_prints_a_summary(fake_mnist, tmp_path, capsys):
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    assert main(flags) == 0
    assert "Test accuracy" in capsys.readouterr().out


def test_fast_dev_run_without_checkpoints(fake_mnist, tmp_path):
    metrics = run_lightning(fake_mnist, tmp_path / "run", "--fast_dev_run", "true")
    assert metrics["best_checkpoint"] is None and 0 <= metrics["test/acc"] <= 1


def test_a_used_output_dir_is_refused(fake_mnist, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text("{}")
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN]
    assert main(flags) == 2
    assert "already holds files from an earlier run" in one_line(capsys.readouterr().err)


def test_reference_script_trains_and_writes_the_same_keys(fake_mnist, tmp_path):
    run_plain(fake_mnist, tmp_path / "plain", "--device", "cpu")
    written = json.loads((tmp_path / "plain" / "metrics.json").read_text())
    assert METRIC_KEYS <= written.keys() and written["test/acc"] > 0.9


@pytest.mark.parametrize("batch_size", ["100", "64"])  # 64 leaves short last batches (1,000 train, 200 val)
def test_lightning_and_plain_give_the_same_training_losses(fake_mnist, tmp_path, batch_size):
    """Same seed, data order and arithmetic: the Trainer replaces .to(device) without changing results."""
    lightning = run_lightning(fake_mnist, tmp_path / "lightning", "--accelerator", "cpu", "--batch_size", batch_size)
    plain = run_plain(fake_mnist, tmp_path / "plain", "--device", "cpu", "--batch_size", batch_size)
    for ours, theirs in zip(lightning["history"], plain["history"], strict=True):
        assert ours["train/loss"] == pytest.approx(theirs["train/loss"], abs=1e-5)
        assert ours["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-5)
        assert ours["val/acc"] == pytest.approx(theirs["val/acc"], abs=1e-6)
    assert lightning["test/acc"] == pytest.approx(plain["test/acc"], abs=1e-6)


def test_reference_script_refuses_a_missing_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert plain_pytorch.main(["--device", "cuda", "--output_dir", str(tmp_path / "p")]) == 2
    assert "asks for a GPU, but none can be used" in one_line(capsys.readouterr().err)


def test_plots_tensorboard_and_quiet(fake_mnist, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    run_lightning(fake_mnist, tmp_path / "run", "--logger", "tensorboard", "--quiet", "true")
    captured = capsys.readouterr()
    assert "Epoch 1" not in captured.err and "Seed set" not in captured.err + captured.out
    for plot in ("curves.png", "confusion_matrix.png"):
        assert (tmp_path / "run" / plot).stat().st_size > 10_000
        assert f"Plot: {tmp_path / 'run' / plot}" in captured.out
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_the_confusion_matrix_counts_every_test_image(fake_mnist, tmp_path):
    from conftest import FAKE_TEST

    config = parse_config(["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "run"), *TINY_RUN])
    from mnist_lightning.datamodule import MNISTDataModule
    from mnist_lightning.lightning_module import MNISTClassifier
    from mnist_lightning.train import build_trainer, kwargs_for

    model = MNISTClassifier(**kwargs_for(MNISTClassifier, config))
    trainer, _, _ = build_trainer(config, tmp_path / "run")
    (results,) = trainer.test(model, datamodule=MNISTDataModule(**kwargs_for(MNISTDataModule, config)))
    matrix = model.test_confusion_matrix
    assert int(matrix.sum()) == FAKE_TEST
    assert float(matrix.trace() / matrix.sum()) == pytest.approx(results["test/acc"])


def test_the_progress_bar_redraws_by_the_clock(monkeypatch):
    from mnist_lightning import callbacks

    clock = [100.0]
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: clock[0])
    bar = callbacks.TimedProgressBar(interval=0.2)
    assert bar._should_update(1, 50)  # the first batch draws
    assert not bar._should_update(2, 50)  # too soon
    assert bar._should_update(50, 50)  # the last batch always draws
    clock[0] += 0.25
    assert bar._should_update(3, 50)
    bar.disable()
    clock[0] += 1
    assert not bar._should_update(4, 50)


@pytest.mark.parametrize(("flags", "expected"), [([], "NoOpProfiler"), (["--profiler", "simple"], "SimpleProfiler")])
def test_no_profiling_costs_nothing_and_a_profiler_can_still_be_chosen(fake_mnist, tmp_path, flags, expected):
    from mnist_lightning.train import build_trainer

    config = parse_config(["--data_dir", str(fake_mnist), *TINY_RUN, *flags])
    trainer, _, _ = build_trainer(config, tmp_path / "run")
    assert type(trainer.profiler).__name__ == expected
    with trainer.profiler.profile("run_training_batch") as action:  # how the Trainer uses it around every hook
        assert action is None or action == "run_training_batch"


def test_training_steps_do_not_read_values_back_from_the_device(fake_mnist, tmp_path, monkeypatch):
    """Reading a tensor's value (.item()) waits for a GPU to finish; the template does it only when it logs."""
    import torch

    reads = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda tensor: reads.append(1) or item(tensor))
    # 1,000 training images in batches of 10: 200 steps over 2 epochs, logged every 10 steps.
    run_lightning(fake_mnist, tmp_path / "run", "--batch_size", "10", "--enable_progress_bar", "true")
    assert len(reads) < 100, f"{len(reads)} reads for 200 training steps"


def test_the_progress_bar_shows_the_step_loss(fake_mnist, tmp_path, capsys):
    run_lightning(fake_mnist, tmp_path / "run", "--enable_progress_bar", "true")
    assert "train/loss_step=" in capsys.readouterr().out  # Lightning's tqdm bars write to stdout
