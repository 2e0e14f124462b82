"""MNISTClassifier: the LightningModule around SimpleNN (loss, accuracy, optimizer; no device code)."""

from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from .devices import supports_fused_optimizer
from .model import SimpleNN


class MNISTClassifier(LightningModule):
    """Train SimpleNN with cross-entropy; report loss and accuracy per stage.

    Args:
        optimizer: ``adam`` or ``sgd`` (with momentum).
        lr: Peak learning rate.
        momentum: Momentum of SGD; ignored by Adam.
        weight_decay: L2 penalty added by the optimizer.
        lr_schedule: ``cosine`` decays the learning rate to zero over the whole run, step by step; ``constant``
            keeps it fixed.
    """

    def __init__(
        self,
        optimizer: Literal["adam", "sgd"] = "adam",
        lr: float = 0.02,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        lr_schedule: Literal["cosine", "constant"] = "cosine",
    ) -> None:
        super().__init__()
        if lr <= 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(
                f"--lr must be > 0 (got {lr}), --momentum and --weight_decay >= 0 (got {momentum}, {weight_decay})"
            )
        self.save_hyperparameters()
        self.net = SimpleNN()
        # Epoch means of the per-sample loss. No NaN check: it would read the value back from a GPU every step.
        self.train_loss = MeanMetric(nan_strategy="disable")
        # One metric object per stage: a metric accumulates state, and sharing one would mix the stages.
        self.val_loss = MeanMetric(nan_strategy="disable")
        self.test_loss = MeanMetric(nan_strategy="disable")
        self.val_acc = MulticlassAccuracy(num_classes=10, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes=10, average="micro")
        self.test_confusion = MulticlassConfusionMatrix(num_classes=10)
        self.test_confusion_matrix: Tensor | None = None  # [true, predicted] counts of the last test run

    def forward(self, images: Tensor) -> Tensor:
        return self.net(images)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        # The batch mean once per sample, so that a short last batch counts for its size. (With
        # nan_strategy="disable", MeanMetric ignores `weight`; per-sample losses would slow the backward pass.)
        self.train_loss.update(loss.detach().expand(len(labels)))
        # self.log costs ~0.3 ms, as much as a whole step of this model on a CPU, so it runs only on the steps
        # the logger writes (every log_every_n_steps), and once per epoch to register the epoch mean: Lightning
        # computes a logged metric object at the end of the epoch, from everything passed to its update().
        # Not prog_bar=True: Lightning would turn the last logged value into a Python number after every step,
        # a GPU sync per step. TimedProgressBar shows it, read only when the bar is redrawn.
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("train/loss_step", loss)
        if batch_idx == 0:
            self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "val", self.val_loss, self.val_acc)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        logits = self._evaluate(batch, batch_idx, "test", self.test_loss, self.test_acc)
        self.test_confusion.update(logits, batch[1])

    def on_test_epoch_end(self) -> None:
        self.test_confusion_matrix = self.test_confusion.compute()  # summed over DDP ranks
        self.test_confusion.reset()

    def predict_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        """Class probabilities [batch, 10] for the images in ``batch[0]``."""
        return self(batch[0]).softmax(dim=-1)

    def _evaluate(
        self, batch: tuple[Tensor, Tensor], batch_idx: int, stage: str, loss: MeanMetric, accuracy: MulticlassAccuracy
    ) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss.update(F.cross_entropy(logits, labels, reduction="none"))
        accuracy.update(logits, labels)
        if batch_idx == 0:  # registered once per epoch, like train/loss; torchmetrics syncs both over DDP ranks
            self.log(f"{stage}/loss", loss, prog_bar=True)
            self.log(f"{stage}/acc", accuracy, prog_bar=True)
        return logits

    def configure_optimizers(self):
        hp = self.hparams
        fused = supports_fused_optimizer(self.device)  # the Trainer has moved the model to its device by now
        if hp.optimizer == "sgd":
            optimizer = torch.optim.SGD(
                self.parameters(), hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay, fused=fused
            )
        else:
            optimizer = torch.optim.Adam(self.parameters(), hp.lr, weight_decay=hp.weight_decay, fused=fused)
        if hp.lr_schedule == "constant":
            return optimizer
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
