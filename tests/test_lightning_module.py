"""The example's task, the Classifier: any network built for the data's sizes; cross-entropy, accuracy, the best epoch
the highest val/acc; a class and its probability per predicted sample; its own checks (labels, the network's output
size, a cosine schedule's end), each one paragraph; the optimizer and schedule it builds; no device code.

Trained on random samples of the sizes the project's data module gives (``Sized``, no files), so that a project that
keeps the Classifier but replaces the data module or the network keeps these tests."""

import ast  # only with_ladder
import io  # only with_ladder
import math
import re
import tokenize  # only with_ladder
from pathlib import Path

import example
import pytest
import torch
import torch.nn.functional as F
from helpers import one_line
from jsonargparse import ArgumentError
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule, Trainer
from own_data import MLP
from torch.utils.data import DataLoader, TensorDataset

import mnist_lightning
from mnist_lightning.core import classes
from mnist_lightning.core.cli import build_parser
from mnist_lightning.core.train import main
from mnist_lightning.lightning_module import Classifier

pytestmark = example.task


def data_sizes() -> tuple[tuple[int, ...], int]:
    """input_shape and num_classes, as the project's default data module gives them to the Classifier."""
    data = example.default_class(classes.DATA_MODULE)()
    return tuple(data.input_shape), data.num_classes


class Sized(LightningDataModule):
    """Random samples of the project's data sizes with labels of its classes (train 40, val 20, test 20 samples, the
    predict set the test samples alone); ``fault`` breaks the labels of one stage's DataLoader: ``float`` labels, a
    label ``too_high`` (num_classes) or ``negative``."""

    def __init__(self, batch_size: int = 16, fault: str = "none", stage: str = "train") -> None:
        super().__init__()
        self.batch_size, self.fault, self.faulty_stage = batch_size, fault, stage
        self.input_shape, self.num_classes = data_sizes()
        generator = torch.Generator().manual_seed(0)
        samples = torch.randn(80, *self.input_shape, generator=generator)
        labels = torch.randint(0, self.num_classes, (80,), generator=generator)
        self.sets = {"train": (0, 40), "val": (40, 60), "test": (60, 80)}
        self.sets = {stage: self.labelled(stage, samples[a:b], labels[a:b]) for stage, (a, b) in self.sets.items()}

    def labelled(self, stage: str, samples: torch.Tensor, labels: torch.Tensor) -> TensorDataset:
        if stage == self.faulty_stage and self.fault != "none":
            labels = labels.clone()
            labels[0] = {"too_high": self.num_classes, "negative": -1}.get(self.fault, 0)
            labels = labels.float() if self.fault == "float" else labels
        return TensorDataset(samples, labels)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["test"], batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["test"].tensors[0], batch_size=self.batch_size)


def classifier(**settings) -> Classifier:
    """The model sized for the project's data, as train.py builds it from the data module."""
    return Classifier(*data_sizes(), **settings)


def wrong_size(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """A network that gives one score too many: --net test_lightning_module.wrong_size."""
    return MLP(input_shape, num_classes + 1)


def trainer(tmp_path: Path, **settings) -> Trainer:
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    return Trainer(accelerator="cpu", default_root_dir=tmp_path, **quiet | settings)


def refused(capsys, code: int, run: Path, phrase: str) -> str:
    """The command ended in one paragraph naming ``phrase``, exit status 2, no traceback, and no run folder left."""
    err = capsys.readouterr().err
    message = one_line(err[err.find("Error:") :])
    assert code == 2 and err.count("Error:") == 1 and "Traceback" not in err, err
    assert phrase in message, message
    assert not run.exists()
    return message


@pytest.mark.parametrize("net", [None, MLP])
def test_a_training_step_updates_the_weights_of_any_network(tmp_path, net):
    model = classifier() if net is None else classifier(net=net)
    before = [p.detach().clone() for p in model.net.parameters()]
    trainer(tmp_path, fast_dev_run=True).fit(model, datamodule=Sized())
    assert isinstance(model.net, MLP) == (net is MLP)
    assert before and all(not p.equal(b) for p, b in zip(model.net.parameters(), before, strict=True))


def test_the_stages_log_their_metrics_and_the_best_is_the_highest_val_acc(tmp_path):
    model, data = classifier(), Sized()
    fitted = trainer(tmp_path, fast_dev_run=True)
    fitted.fit(model, datamodule=data)
    assert {"train/loss", "val/loss", "val/acc"} <= fitted.callback_metrics.keys()
    assert (Classifier.monitor, Classifier.mode) == ("val/acc", "max")  # the metric that picks the best checkpoint
    fitted.test(model, datamodule=data, verbose=False)
    assert {"test/loss", "test/acc"} <= fitted.callback_metrics.keys()
    assert 0 <= float(fitted.callback_metrics["test/acc"]) <= 1


def test_epoch_metrics_are_over_every_sample_of_their_own_stage(tmp_path):
    """Means over samples (batches of 16 leave a short last batch of 4 in validation and test), each stage's own: the
    test's accuracy is not mixed with the validation's that came before it."""
    model, data = classifier(), Sized(batch_size=16)
    fitted = trainer(tmp_path, max_epochs=1)
    fitted.fit(model, datamodule=data)
    validated = dict(fitted.callback_metrics)
    tested = fitted.test(model, datamodule=data, verbose=False)[0]
    with torch.no_grad():
        for stage, logged in (("val", validated), ("test", tested)):
            samples, labels = data.sets[stage].tensors
            scores = model.eval()(samples)
            expected = {"loss": F.cross_entropy(scores, labels), "acc": (scores.argmax(-1) == labels).float().mean()}
            for name, value in expected.items():
                assert float(logged[f"{stage}/{name}"]) == pytest.approx(float(value), abs=1e-6), (stage, name)


def test_predict_step_gives_each_sample_its_class_and_that_class_probability():
    model = classifier().eval()
    samples = torch.randn(5, *data_sizes()[0])
    with torch.no_grad():
        predicted = model.predict_step((samples, torch.zeros(5, dtype=torch.long)), 0)  # labels are not used
        probabilities = model(samples).softmax(dim=-1)
        alone = model.predict_step(samples, 0)  # a batch of samples alone, as a predict_dataloader may give it
    assert set(predicted) == {"prediction", "confidence"}  # predict.py's columns
    assert predicted["prediction"].dtype == torch.int64 and predicted["prediction"].equal(probabilities.argmax(-1))
    torch.testing.assert_close(predicted["confidence"], probabilities.max(-1).values)
    assert all(torch.equal(alone[key], predicted[key]) for key in predicted)


def test_the_network_is_built_for_the_datas_sizes():
    built = []

    def factory(input_shape, num_classes):
        built.append((input_shape, num_classes))
        return MLP(input_shape, num_classes)

    model = Classifier([3, 8, 8], 4, net=factory)  # e.g. small colour pictures of 4 classes
    assert built == [((3, 8, 8), 4)]
    assert model(torch.zeros(2, 3, 8, 8)).shape == (2, 4)
    assert model.example_input_array.shape == (2, 3, 8, 8)  # what export and the first-batch check take
    assert model.test_confusion.num_classes == 4  # only with_plots
    assert (model.hparams.input_shape, model.hparams.num_classes) == ([3, 8, 8], 4)
    ready_made = MLP((3, 8, 8), 4)
    assert Classifier([3, 8, 8], 4, net=lambda shape, classes: ready_made).net is ready_made


def test_a_network_of_the_wrong_size_is_refused_before_any_step(tmp_path, capsys):
    """The Classifier probes its network with its example input as it is built (on a GPU, a wrong size would only fail
    an assertion in a step); train.py says it in one paragraph."""
    input_shape, num_classes = data_sizes()
    expected = f"MLP gives {[num_classes + 1]} scores, not {num_classes}."
    with pytest.raises(MisconfigurationException, match=re.escape(expected)):
        Classifier(input_shape, num_classes, net=wrong_size)
    run = tmp_path / "run"
    code = main(["--data", "test_lightning_module.Sized", "--net", "test_lightning_module.wrong_size", *quick(run)])
    refused(capsys, code, run, expected)


def test_a_network_that_fails_on_the_example_input_raises_its_own_error():
    def broken(input_shape, num_classes):
        return torch.nn.Linear(math.prod(input_shape) + 1, num_classes)  # no flatten, the wrong width

    with pytest.raises(RuntimeError):  # the network's own error, which the entry points show with its traceback
        Classifier(*data_sizes(), net=broken)


def quick(run: Path) -> list[str]:
    return ["--output_dir", str(run), "--max_epochs", "1", "--enable_progress_bar", "false", "--accelerator", "cpu"]


@pytest.mark.parametrize(
    ("stage", "fault", "said"),
    [
        ("train", "float", "torch.float32 labels"),
        ("val", "too_high", "labels 0 to"),
        ("test", "negative", "labels -1 to"),
    ],
)
def test_labels_that_are_not_class_indices_are_one_paragraph(tmp_path, capsys, stage, fault, said):
    """Each stage's first batch: int64 labels from 0 to num_classes - 1. A test's refusal keeps the complete fit."""
    run = tmp_path / "run"
    data = ["--data", "test_lightning_module.Sized", "--data.fault", fault, "--data.stage", stage]
    code = main([*data, *quick(run)])
    err = capsys.readouterr().err
    message = one_line(err[err.find("Error:") :])
    assert code == 2 and err.count("Error:") == 1 and "Traceback" not in err, err
    _, num_classes = data_sizes()
    assert said in message and f"not int64 classes 0 to {num_classes - 1}" in message
    if stage == "test":
        assert f"The fit is complete and kept in {run}" in message and (run / "checkpoints" / "last.ckpt").is_file()
    else:
        assert not run.exists()


@pytest.mark.parametrize(("name", "cls"), [("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_optimizer_choice_and_hyperparameters(name, cls):
    model = classifier(optimizer=name, lr=0.5, momentum=0.7, lr_schedule="constant")
    optimizer = model.configure_optimizers()  # a constant learning rate: no schedule
    assert isinstance(optimizer, cls) and optimizer.defaults["lr"] == 0.5
    if name == "sgd":
        assert optimizer.defaults["momentum"] == 0.7
    assert model.hparams.optimizer == name  # save_hyperparameters: stored in every checkpoint


def test_the_cosine_schedule_decays_to_zero_over_the_run(tmp_path):
    model = classifier()
    fitted = trainer(tmp_path, max_epochs=2, enable_checkpointing=False)
    fitted.fit(model, datamodule=Sized(batch_size=10))  # 4 steps per epoch
    (schedule,) = fitted.lr_scheduler_configs
    assert schedule.scheduler.T_max == 8 and schedule.interval == "step"
    assert fitted.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_a_cosine_schedule_without_an_end_is_one_paragraph(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["--data", "test_lightning_module.Sized", *quick(run), "--max_epochs", "-1"])
    refused(capsys, code, run, "--max_epochs -1 gives the cosine schedule no end: give --max_steps.")


def test_compile_keeps_the_checkpoint_keys():
    """--compile compiles the network in place as training starts: checkpoints keep the uncompiled network's keys."""
    plain, compiled = classifier(), classifier(compile=True)
    compiled.on_train_start()  # what the Trainer calls
    assert compiled.hparams.compile is True
    assert list(compiled.state_dict()) == list(plain.state_dict())
    assert not any("_orig_mod" in key for key in compiled.state_dict())


@pytest.mark.parametrize("flags", [["--lr", "0"], ["--lr", "-1.0"], ["--momentum", "-0.1"], ["--weight_decay", "-1"]])
def test_the_models_bounds_are_checked_by_the_parser(flags):
    """Written once, as pydantic's types (PositiveFloat) in the model's signature: jsonargparse checks them."""
    with pytest.raises(ArgumentError, match=f'"{flags[0][2:]}"'):
        build_parser().parse_args(flags)


# with_ladder:
@example.data  # the example's data module
def code_lines(path: Path) -> int:
    """Lines holding code: no blank line, comment, docstring (the Args that --help shows) or option marker."""
    text = path.read_text()
    docstrings = {
        line
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node) is not None
        for line in range(node.body[0].lineno, node.body[0].end_lineno + 1)
    }
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    return len({token.start[0] for token in tokens if token.type not in skipped} - docstrings)


def test_the_lightning_module_and_the_data_module_are_shorter_than_fabrics_whole_script():
    """What a user reads first and edits holds less code on the Trainer rung than scripts/train_fabric.py, though the
    task (its metrics, its best checkpoint, its checks of labels and network, its predictions) is all in it; the run
    machinery (cli.py, checks.py, ...) stays out of both files."""
    package, root = Path(mnist_lightning.__file__).parent, Path(__file__).resolve().parents[1]
    user_files = code_lines(package / "lightning_module.py") + code_lines(package / "datamodule.py")
    assert user_files < code_lines(root / "scripts" / "train_fabric.py")


# end with_ladder
def test_no_device_code_on_the_lightning_side():
    package = Path(mnist_lightning.__file__).parent
    for name in ("lightning_module.py", "model.py", "core/train.py", "core/cli.py"):
        source = (package / name).read_text()
        assert ".cuda(" not in source and ".to(device" not in source and "torch.device(" not in source, name
