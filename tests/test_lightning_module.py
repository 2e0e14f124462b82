"""Classifier: any network, built for the data's sizes; per-stage metrics, the optimizer and schedule it builds,
no device code."""

import re  # only with_ladder
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import FAKE_VAL, SmallCNN
from jsonargparse import ArgumentError
from lightning.pytorch import Trainer

import mnist_lightning
from mnist_lightning.core.checks import check_network
from mnist_lightning.core.cli import build_parser
from mnist_lightning.core.errors import UserError
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.lightning_module import Classifier
from mnist_lightning.model import SimpleNN

MNIST = MNISTDataModule.input_shape, MNISTDataModule.num_classes  # (1, 28, 28), 10: what the data module says


def classifier(**settings) -> Classifier:
    """The model sized for MNIST, as train.py builds it from the data module."""
    return Classifier(*MNIST, **settings)


def batch(size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(size, 1, 28, 28), torch.randint(0, 10, (size,))


def fit_one_batch(model: Classifier, data_dir) -> Trainer:
    """One training and one validation batch through a real Trainer loop."""
    datamodule = MNISTDataModule(str(data_dir), val_size=FAKE_VAL, batch_size=50)
    trainer = Trainer(accelerator="cpu", fast_dev_run=True, logger=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=datamodule)
    return trainer


@pytest.mark.parametrize("net", [None, SmallCNN])
def test_a_training_step_updates_the_weights_of_any_network(fake_mnist, net):
    model = classifier() if net is None else classifier(net=net)
    assert isinstance(model.net, SmallCNN if net is not None else SimpleNN)
    before = [p.detach().clone() for p in model.net.parameters()]
    fit_one_batch(model, fake_mnist)
    assert all(not p.equal(b) for p, b in zip(model.net.parameters(), before, strict=True))


def test_stages_log_their_metrics_under_stage_names(fake_mnist):
    model = classifier()
    trainer = fit_one_batch(model, fake_mnist)
    assert {"train/loss", "val/loss", "val/acc"} <= trainer.callback_metrics.keys()
    trainer.test(model, datamodule=trainer.datamodule, verbose=False)
    assert {"test/loss", "test/acc"} <= trainer.callback_metrics.keys()
    assert 0 <= float(trainer.callback_metrics["test/acc"]) <= 1


def test_each_stage_has_its_own_metric_objects():
    model = classifier()
    assert model.val_acc is not model.test_acc and model.val_loss is not model.test_loss


def test_predict_step_returns_class_probabilities():
    model = classifier()
    probabilities = model.predict_step(batch(5), 0)
    assert probabilities.shape == (5, 10)
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(5))
    samples = batch(5)[0]  # a batch of samples alone, as a data module's predict_dataloader may give it
    torch.testing.assert_close(model.predict_step(samples, 0), model.predict_step((samples,), 0))


def test_the_network_is_built_for_the_datas_sizes():
    built = []

    def factory(input_shape, num_classes):
        built.append((input_shape, num_classes))
        return SimpleNN(input_shape, num_classes)

    model = Classifier([3, 8, 8], 4, net=factory)  # e.g. small colour pictures of 4 classes
    assert built == [((3, 8, 8), 4)]
    assert model(torch.zeros(2, 3, 8, 8)).shape == (2, 4)
    assert model.test_confusion.num_classes == 4  # only with_plots
    assert (model.hparams.input_shape, model.hparams.num_classes) == ([3, 8, 8], 4)
    ready_made = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    assert Classifier(*MNIST, net=lambda shape, classes: ready_made).net is ready_made


def test_a_network_that_does_not_fit_the_data_is_refused():
    """The machinery probes the network with the data's sizes before training (core.checks.check_network)."""
    with pytest.raises(UserError, match=r"maps \[2, 1, 28, 28\] to \[2, 10\], not to 5 scores each"):
        check_network(SimpleNN((1, 28, 28), 10), torch.zeros(2, 1, 28, 28), 5)
    with pytest.raises(RuntimeError):  # the network's own error, which the entry points show with its traceback
        check_network(SimpleNN((1, 28, 28), 10), torch.zeros(2, 3, 28, 28), 10)


@pytest.mark.parametrize(("name", "cls"), [("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_optimizer_choice_and_hyperparameters(name, cls):
    model = classifier(optimizer=name, lr=0.5, momentum=0.7, lr_schedule="constant")
    optimizer = model.configure_optimizers()  # a constant learning rate: no schedule
    assert isinstance(optimizer, cls) and optimizer.defaults["lr"] == 0.5
    if name == "sgd":
        assert optimizer.defaults["momentum"] == 0.7
    assert model.hparams.optimizer == name  # save_hyperparameters: stored in every checkpoint


def test_the_cosine_schedule_decays_to_zero_over_the_run(fake_mnist, tmp_path):
    model = classifier()
    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL, batch_size=100)  # 10 steps per epoch
    trainer = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=datamodule)
    (schedule,) = trainer.lr_scheduler_configs
    assert schedule.scheduler.T_max == 20 and schedule.interval == "step"
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("flags", [["--lr", "0"], ["--lr", "-1.0"], ["--momentum", "-0.1"], ["--weight_decay", "-1"]])
def test_the_models_bounds_are_checked_by_the_parser(flags):
    """Written once, as pydantic's types (PositiveFloat) in the model's signature: jsonargparse checks them."""
    with pytest.raises(ArgumentError, match=f'"{flags[0][2:]}"'):
        build_parser().parse_args(flags)


# with_ladder:
def test_the_lightning_module_and_the_data_module_are_shorter_than_fabrics_whole_script():
    """What a user reads first and edits is shorter on the Trainer rung than scripts/train_fabric.py; the run
    machinery (cli.py, checks.py, ...) stays out of both files. Counted as the default bake has them: without the
    lines that are option markers."""
    package, root = Path(mnist_lightning.__file__).parent, Path(__file__).resolve().parents[1]
    marker = re.compile(r"\s*# (end )?with_\w+:?\s*")
    lines = [
        line
        for name in ("lightning_module.py", "datamodule.py")
        for line in (package / name).read_text().splitlines()
        if not marker.fullmatch(line)
    ]
    assert len(lines) < len((root / "scripts" / "train_fabric.py").read_text().splitlines())


# end with_ladder
def test_no_device_code_on_the_lightning_side():
    package = Path(mnist_lightning.__file__).parent
    for name in ("lightning_module.py", "model.py", "core/train.py", "core/cli.py"):
        source = (package / name).read_text()
        assert ".cuda(" not in source and ".to(device" not in source and "torch.device(" not in source, name


def test_epoch_losses_are_means_over_samples_even_with_a_short_last_batch(fake_mnist, tmp_path):
    # Batches of 64 leave a last batch of 8 in the validation split: a mean of batch means would be off.
    datamodule = MNISTDataModule(str(fake_mnist), val_size=FAKE_VAL, batch_size=64)
    model = classifier()
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=datamodule)
    images, labels = map(torch.cat, zip(*datamodule.val_dataloader(), strict=True))
    with torch.no_grad():
        expected = F.cross_entropy(model(images), labels)
    torch.testing.assert_close(trainer.callback_metrics["val/loss"], expected)
