"""Classifier: the LightningModule around any classification network (loss, metrics, optimizer; no device code).

It knows nothing of the data: the data module gives the shape of one sample and the number of classes, and the
network is built with them.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from .model import SimpleNN, compile_network
from .optim import LARGEST_LR, OptimizerName, ScheduleName, build_optimizer, build_schedule


class ModelSettingError(ValueError):
    """A setting of the Classifier that cannot work (its own check, not an error of the network's class)."""


class NetworkMismatchError(ModelSettingError):
    """The network cannot take the data's samples, or does not give one score per class for each."""


# A network class (or any callable) taking the shape of one sample and the number of classes first.
NetworkFactory = Callable[[tuple[int, ...], int], nn.Module]


class Classifier(LightningModule):
    """Train a network with cross-entropy; report loss and accuracy per stage.

    Args:
        input_shape: The shape of one sample, e.g. ``(1, 28, 28)``; given by the data module.
        num_classes: The number of classes; given by the data module.
        net: The network, built as ``net(input_shape, num_classes)``: a class whose first two arguments are those,
            like ``SimpleNN``. On the command line: ``--net SimpleNN`` or ``--net my_package.MyCNN --net.width 32``.
        optimizer: ``adam``, or ``sgd`` with momentum.
        lr: Peak learning rate.
        momentum: Momentum of SGD; ignored by Adam.
        weight_decay: L2 penalty added by the optimizer.
        lr_schedule: ``cosine`` decays the learning rate to zero over the whole run, step by step;
            ``constant`` keeps it fixed.
        compile: Compile the network with ``torch.compile`` when the Trainer sets up the model; checkpoints
            keep the same keys with and without it.
    """

    monitorable = ("train/loss", "val/loss", "val/acc")  # what it logs during fit, for callbacks to monitor

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        net: NetworkFactory = SimpleNN,
        optimizer: OptimizerName = "adam",
        lr: float = 0.02,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        lr_schedule: ScheduleName = "cosine",
        compile: bool = False,
    ) -> None:
        super().__init__()
        if not 0 < lr <= LARGEST_LR:
            raise ModelSettingError(
                f"the learning rate (lr) must be a positive number up to {LARGEST_LR:.3g}, got {lr}"
            )
        for name, value in (("momentum", momentum), ("weight_decay", weight_decay)):
            if not value >= 0:
                raise ModelSettingError(f"{name} must be a number >= 0, got {value}")
        if num_classes < 2 or not input_shape or min(input_shape) < 1:
            raise ModelSettingError(
                f"the data must have 2 classes or more and samples of a positive shape, got "
                f"{num_classes} classes of shape {tuple(input_shape)}"
            )
        # The network's class path and arguments are recorded by the command line (see cli.py).
        self.save_hyperparameters(ignore=["net"])
        self.net = net(tuple(input_shape), num_classes)
        # Two blank samples: Lightning's model summary shows the network's input and output sizes from it, and a
        # network that cannot map them to one score per class is refused now rather than at the first batch.
        self.example_input_array = torch.zeros(2, *input_shape)
        check_network(self.net, self.example_input_array, num_classes)
        # One metric object per stage: a metric accumulates state, and sharing one would mix the stages.
        # Means of per-sample losses, NaN kept: a diverged run must show as one, not have its NaNs dropped.
        self.train_loss = MeanMetric(nan_strategy="disable")
        # Saved in checkpoints: a run stopped mid-epoch and resumed then reports the mean over the whole epoch.
        self.train_loss.persistent(True)
        self.val_loss = MeanMetric(nan_strategy="disable")
        self.test_loss = MeanMetric(nan_strategy="disable")
        self.val_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        self.test_confusion = MulticlassConfusionMatrix(num_classes=num_classes)
        self.test_confusion_matrix: Tensor | None = None  # [true, predicted] counts of the last test run

    def configure_model(self) -> None:
        # Lightning calls this hook before fit, validate, test and predict. Compiled in place: checkpoints keep
        # their keys (see compile_network).
        if self.hparams.compile and not getattr(self.net, "_compiled_call_impl", None):
            compile_network(self.net)

    def on_train_start(self) -> None:
        # A resumed run given a longer --max_epochs gets its schedule back from the checkpoint, length included:
        # the cosine would reach zero at the old end, then climb. From the resumed step on, the learning rate
        # becomes what a run planned this long from the start would have (so an extended finished run's rises).
        total = self.trainer.estimated_stepping_batches
        for config in self.trainer.lr_scheduler_configs if math.isfinite(total) else []:
            schedule = config.scheduler
            if isinstance(schedule, CosineAnnealingLR) and config.interval == "step" and schedule.T_max != total:
                schedule.T_max = max(int(total), 1)
                progress = min(schedule.last_epoch, schedule.T_max) / schedule.T_max
                for group, base in zip(schedule.optimizer.param_groups, schedule.base_lrs, strict=True):
                    group["lr"] = schedule.eta_min + (base - schedule.eta_min) * (1 + math.cos(math.pi * progress)) / 2

    def on_train_epoch_start(self) -> None:
        # The epoch loss is saved in checkpoints (see __init__). A checkpoint written at an epoch's end holds that
        # epoch's sum, which the next epoch must not start from; a run resumed mid-epoch keeps its partial sum
        # (Lightning does not call this hook when it resumes in the middle of an epoch).
        self.train_loss.reset()

    def forward(self, samples: Tensor) -> Tensor:
        return self.net(samples)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        samples, labels = batch
        losses = F.cross_entropy(self(samples), labels, reduction="none")
        self.train_loss.update(losses.detach())  # per sample, so a short last batch counts for its size
        # Logged once per epoch, at its last batch: a self.log call costs more than a small network's whole step.
        # Not in on_train_epoch_end: Lightning runs the callbacks' epoch-end hooks (progress bar, history) first.
        if self.trainer.is_last_batch:
            self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        return losses.mean()

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_loss, self.val_acc)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        logits = self._evaluate(batch, "test", self.test_loss, self.test_acc)
        self.test_confusion.update(logits, batch[1])

    def on_test_epoch_end(self) -> None:
        self.test_confusion_matrix = self.test_confusion.compute()  # summed over DDP ranks
        self.test_confusion.reset()

    def predict_step(self, batch: Tensor | tuple[Tensor, ...], batch_idx: int) -> Tensor:
        """Class probabilities [batch, classes] for the samples in ``batch`` (or ``batch[0]``: labels are unused)."""
        if isinstance(batch, list | tuple):
            batch = batch[0]
        return self(batch).softmax(dim=-1)

    def _evaluate(self, batch: tuple[Tensor, Tensor], stage: str, loss: MeanMetric, accuracy: MulticlassAccuracy):
        samples, labels = batch
        logits = self(samples)
        loss.update(F.cross_entropy(logits, labels, reduction="none"))
        accuracy.update(logits, labels)
        # Metric objects: Lightning computes them once at the end of the epoch, synced over DDP ranks.
        self.log(f"{stage}/loss", loss, prog_bar=True)
        self.log(f"{stage}/acc", accuracy, prog_bar=True)
        return logits

    def configure_optimizers(self):
        hp = self.hparams
        optimizer = build_optimizer(self.parameters(), hp.optimizer, hp.lr, hp.momentum, hp.weight_decay)
        schedule = build_schedule(optimizer, hp.lr_schedule, self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def check_network(net: nn.Module, samples: Tensor, num_classes: int) -> None:
    """Raise a ValueError, in the network's terms, unless ``net`` maps ``samples`` to one score per class each."""
    training = net.training
    net.eval()  # no batch-norm statistics updated, no dropout drawn from the random generator
    try:
        with torch.no_grad():
            scores = net(samples)
    except Exception as error:
        raise NetworkMismatchError(
            f"the network {type(net).__name__} cannot take a batch of samples of shape {list(samples.shape)}: "
            f"{str(error).strip() or type(error).__name__}"
        ) from error
    finally:
        net.train(training)
    expected = [len(samples), num_classes]
    if not isinstance(scores, Tensor) or list(scores.shape) != expected:
        got = list(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise NetworkMismatchError(
            f"the network {type(net).__name__} maps a batch of samples of shape {list(samples.shape)} to {got}; "
            f"it must give {expected}, one score per class for each sample"
        )
    if not any(parameter.requires_grad for parameter in net.parameters()):
        raise NetworkMismatchError(f"the network {type(net).__name__} has no trainable parameters: nothing to train")
