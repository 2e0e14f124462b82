import math
from collections.abc import Callable
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from annotated_types import Lt
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningModule
from pydantic import NonNegativeFloat, PositiveFloat
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR
from torchmetrics import MeanMetric
from torchmetrics.classification.confusion_matrix import MulticlassConfusionMatrix  # only with_plots

from .model import SimpleNN


class Classifier(LightningModule):
    """Classify samples with a network trained by cross-entropy (no device code). The task is this module's: what it
    logs, which epoch is best (``monitor``, ``mode``), what predict.py writes (``predict_step``) and what export.py
    exports (``forward`` on ``example_input_array``); the data module gives the arguments without a default.

    Args:
        net: The network, built as net(input_shape, num_classes): --net my_package.MyCNN --net.width 32.
        optimizer: adam, or sgd with momentum.
        lr: Peak learning rate.
        momentum: Momentum of SGD; ignored by Adam.
        weight_decay: L2 penalty added by the optimizer.
        lr_schedule: cosine decays the learning rate to zero over the run, step by step; constant keeps it.
        compile: Compile the network with torch.compile (checkpoints keep the same keys).
    """

    monitor, mode = "val/acc", "max"  # the best checkpoint: the highest validation accuracy

    def __init__(
        self,
        input_shape,  # these two are the data module's; the rest are options
        num_classes,
        net: Callable[[tuple[int, ...], int], nn.Module] = SimpleNN,
        optimizer: Literal["adam", "sgd"] = "adam",
        lr: PositiveFloat = 0.02,  # bounds: checked by the command line's parser
        momentum: Annotated[NonNegativeFloat, Lt(1)] = 0.9,  # at 1, past gradients never fade
        weight_decay: NonNegativeFloat = 0.0,
        lr_schedule: Literal["cosine", "constant"] = "cosine",
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["net"])  # cli.py records the network's class path
        self.net = net(tuple(input_shape), num_classes)
        with torch.no_grad():  # one score per class, or the first step fails (on a GPU, as a device-side assert)
            scores = self.net.eval()(self.example_input_array).shape[1:]
        if scores != (num_classes,):
            raise MisconfigurationException(
                f"{type(self.net).__name__} gives {list(scores)} scores, not {num_classes}."
            )
        self.net.train()
        # A metric object per stage, as they hold state: means over samples of the loss and of right answers (the
        # accuracy); NaN kept, so that a diverged run shows.
        self.train_loss, self.val_loss, self.val_acc, self.test_loss, self.test_acc = (
            MeanMetric(nan_strategy="disable") for _ in range(5)
        )
        self.train_loss.persistent(True)  # in checkpoints: a run resumed mid-epoch reports the whole epoch's mean
        # with_plots:
        self.test_confusion = MulticlassConfusionMatrix(num_classes)
        self.test_confusion_matrix = None  # [true, predicted] counts of the last test run, for plots
        # end with_plots

    @property
    def example_input_array(self):  # the model summary's, in the weights' dtype (--precision 16-true)
        return torch.zeros(2, *self.hparams.input_shape, dtype=self.dtype)

    def on_train_batch_start(self, batch, batch_idx, dataloader_idx=0):  # each stage's first batch: its labels
        if batch_idx > 0:
            return
        labels, classes = batch[1], self.hparams.num_classes
        if not (labels.dtype == torch.long and 0 <= labels.min() <= labels.max() < classes):
            stage, got = self.trainer.state.stage, f"{labels.dtype} labels {labels.min()} to {labels.max()}"
            raise MisconfigurationException(f"The first {stage} batch has {got}, not int64 classes 0 to {classes - 1}.")

    on_validation_batch_start = on_test_batch_start = on_train_batch_start

    def on_train_start(self):
        # Compiled here, after the sanity check and the model summary: compiled by their inference-mode calls first,
        # the training code would differ in the last bits, on a GPU, from the code an uncompiled run trains with.
        if self.hparams.compile:
            self.net.compile(dynamic=True)  # in place: same checkpoint keys; dynamic: one code for all batch sizes

    def on_train_epoch_start(self):
        self.train_loss.reset()  # a checkpoint of an epoch's end holds that epoch's sum (none mid-epoch: no call)

    def forward(self, samples):
        return self.net(samples)

    def training_step(self, batch, batch_idx):
        samples, labels = batch
        losses = F.cross_entropy(self(samples), labels, reduction="none")
        self.train_loss.update(losses.detach())
        if self.trainer.is_last_batch:  # once per epoch: a self.log call costs more than a small network's step
            self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        return losses.mean()

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val", self.val_loss, self.val_acc)

    def test_step(self, batch, batch_idx):
        return self._evaluate(batch, "test", self.test_loss, self.test_acc)

    # with_plots:
    def on_test_batch_end(self, logits, batch, batch_idx, dataloader_idx=0):
        self.test_confusion.update(logits, batch[1])

    def on_test_epoch_end(self):
        self.test_confusion_matrix = self.test_confusion.compute()  # summed over DDP ranks
        self.test_confusion.reset()

    # end with_plots
    def predict_step(self, batch, batch_idx):  # predict.py's columns: the class, and its probability
        probabilities = self(batch[0] if isinstance(batch, list | tuple) else batch).softmax(dim=-1)  # no labels used
        confidence, prediction = probabilities.max(dim=-1)
        return {"prediction": prediction, "confidence": confidence}

    def _evaluate(self, batch, stage, loss, accuracy):
        samples, labels = batch
        logits = self(samples)
        loss.update(F.cross_entropy(logits, labels, reduction="none"))
        accuracy.update(logits.argmax(-1) == labels)
        # Metric objects: Lightning computes them once per epoch, synced over DDP ranks.
        self.log_dict({f"{stage}/loss": loss, f"{stage}/acc": accuracy}, prog_bar=True)
        return logits

    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "sgd":
            optimizer = torch.optim.SGD(self.parameters(), hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
        else:
            optimizer = torch.optim.Adam(self.parameters(), hp.lr, weight_decay=hp.weight_decay)
        if hp.lr_schedule == "constant":
            return optimizer
        if math.isinf(steps := self.trainer.estimated_stepping_batches):  # the schedule needs the run's length
            raise MisconfigurationException("--max_epochs -1 gives the cosine schedule no end: give --max_steps.")
        schedule = RunLengthCosine(optimizer, steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class RunLengthCosine(CosineAnnealingLR):
    """A cosine to zero that keeps this run's length when it loads a checkpoint's state: resumed with a longer
    --max_epochs, it would reach zero at the old end, then climb. From the resumed step on, the learning rate is what
    a run planned this long from the start would have (so an extended finished run's rises)."""

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict | {"T_max": self.T_max})
        if state_dict["T_max"] != self.T_max:  # else the checkpoint's learning rate stands, to the bit
            for group in self.optimizer.param_groups:
                group["lr"] = group["initial_lr"] * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
