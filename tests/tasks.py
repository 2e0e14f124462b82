"""Tasks of the tests' own: LightningModules that are not the example's Classifier, and data modules for them. The
machinery's tests run on these (conftest.py's ``task`` fixture names them in core/classes.py, as a project names
its own), so that a project whose network, data or task is no longer the example's keeps a suite that tests it.

- ``Classify`` on ``own_data.Points``: single-label classification, the best epoch the highest val/acc.
- ``Regress`` on ``Curve``: float targets, mean squared error, the best epoch the lowest val/loss.
- ``Tag`` on ``Tagged``: multi-label classification, binary cross-entropy, the best epoch the highest val/f1.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from own_data import MLP, split
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy, MultilabelF1Score

Net = Callable[[tuple[int, ...], int], nn.Module]  # built as net(input_shape, outputs), as the example's networks


class Task(LightningModule):
    """What the three share: a network built for the data's sizes (``net(input_shape, outputs)``), Adam, and each
    stage's loss logged per epoch (``train/loss``, ``val/loss``, ``test/loss``)."""

    def __init__(self, input_shape, outputs: int, net: Net, lr: float) -> None:
        super().__init__()
        self.net, self.lr = net(tuple(input_shape), outputs), lr

    @property
    def example_input_array(self) -> Tensor:
        return torch.zeros(2, *self.hparams.input_shape, dtype=self.dtype)

    def forward(self, samples: Tensor) -> Tensor:
        return self.net(samples)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        raise NotImplementedError

    def training_step(self, batch, batch_idx):
        loss = self.loss(self(batch[0]), batch[1])
        self.log("train/loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.evaluate("val", batch)

    def test_step(self, batch, batch_idx):
        self.evaluate("test", batch)

    def evaluate(self, stage: str, batch) -> Tensor:
        outputs = self(batch[0])
        self.log(f"{stage}/loss", self.loss(outputs, batch[1]), sync_dist=True)
        return outputs

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), self.lr)


class Classify(Task):
    """Single-label classification: one score per class, cross-entropy, torchmetrics' accuracy."""

    monitor, mode = "val/acc", "max"

    def __init__(self, input_shape, num_classes: int, net: Net = MLP, lr: float = 0.05) -> None:
        super().__init__(input_shape, num_classes, net, lr)
        self.save_hyperparameters(ignore=["net"])
        self.val_acc, self.test_acc = MulticlassAccuracy(num_classes), MulticlassAccuracy(num_classes)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs, targets)

    def evaluate(self, stage: str, batch) -> Tensor:
        outputs = super().evaluate(stage, batch)
        accuracy = getattr(self, f"{stage}_acc")
        accuracy.update(outputs, batch[1])
        self.log(f"{stage}/acc", accuracy)
        return outputs

    def predict_step(self, batch, batch_idx):
        samples = batch[0] if isinstance(batch, list | tuple) else batch
        confidence, prediction = self(samples).softmax(-1).max(-1)
        return {"prediction": prediction, "confidence": confidence}


class Regress(Task):
    """Regression: ``num_targets`` values per sample, mean squared error; the best epoch the lowest val/loss."""

    monitor, mode = "val/loss", "min"

    def __init__(self, input_shape, num_targets: int, net: Net = MLP, lr: float = 0.02) -> None:
        super().__init__(input_shape, num_targets, net, lr)
        self.save_hyperparameters(ignore=["net"])

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.mse_loss(outputs, targets)

    def predict_step(self, batch, batch_idx):
        return {"value": self(batch[0] if isinstance(batch, list | tuple) else batch).squeeze(-1)}


class Tag(Task):
    """Multi-label classification: a score per label, binary cross-entropy, torchmetrics' F1 (macro)."""

    monitor, mode = "val/f1", "max"

    def __init__(self, input_shape, num_labels: int, net: Net = MLP, lr: float = 0.05) -> None:
        super().__init__(input_shape, num_labels, net, lr)
        self.save_hyperparameters(ignore=["net"])
        self.val_f1, self.test_f1 = MultilabelF1Score(num_labels), MultilabelF1Score(num_labels)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(outputs, targets.float())

    def evaluate(self, stage: str, batch) -> Tensor:
        outputs = super().evaluate(stage, batch)
        f1 = getattr(self, f"{stage}_f1")
        f1.update(outputs, batch[1])
        self.log(f"{stage}/f1", f1)
        return outputs

    def predict_step(self, batch, batch_idx):
        labels = self(batch[0] if isinstance(batch, list | tuple) else batch) > 0
        return {"labels": [torch.nonzero(row).flatten().tolist() for row in labels]}


class Plane(LightningDataModule):
    """Shared shape of the two data modules below: 2-D points, shuffled for training, generated from a seed."""

    input_shape = (2,)

    def __init__(self, batch_size: int = 32, samples: int = 600) -> None:
        super().__init__()
        self.batch_size = batch_size
        generator = torch.Generator().manual_seed(0)
        points = 4 * torch.rand(samples, 2, generator=generator) - 2
        self.sets = split(points, self.targets(points, generator))
        self.sets["predict"] = TensorDataset(self.sets["test"].tensors[0][: samples // 10])

    def targets(self, points: Tensor, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["test"], batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["predict"], batch_size=self.batch_size)


class Curve(Plane):
    """A smooth surface over the plane, with a little noise: one float target per point."""

    num_targets = 1

    def targets(self, points: Tensor, generator: torch.Generator) -> Tensor:
        clean = torch.sin(points[:, :1] * math.pi / 2) * points[:, 1:]
        return clean + 0.05 * torch.randn(clean.shape, generator=generator)


class Tagged(Plane):
    """Three labels per point, each on or off: right of the y axis, above the x axis, inside the unit circle."""

    num_labels = 3

    def targets(self, points: Tensor, generator: torch.Generator) -> Tensor:
        return torch.stack([points[:, 0] > 0, points[:, 1] > 0, points.norm(dim=1) < 1], dim=1).long()
