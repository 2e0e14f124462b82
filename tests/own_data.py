"""A user's own data modules and networks, in a file of their own: what ``--data own_data.Points`` and
``--net own_data.TinyCNN`` load with no file of the project changed (tests/test_own_data.py runs them; Points is also
the default data module of the tests' own task, conftest.py's ``task``).

A data module of this template takes ``batch_size`` and has as attributes what the LightningModule takes from it
(its arguments without a default): for a classifier, ``num_classes`` (an int) and ``input_shape`` (the shape of one
sample). A network takes those two first, then its own options.
"""

import math
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor, nn
from torch.utils.data import DataLoader, SequentialSampler, TensorDataset


def split(samples: Tensor, labels: Tensor) -> dict[str, TensorDataset]:
    """60 % train, 20 % validation, 20 % test."""
    train, val = int(0.6 * len(labels)), int(0.8 * len(labels))
    return {
        "train": TensorDataset(samples[:train], labels[:train]),
        "val": TensorDataset(samples[train:val], labels[train:val]),
        "test": TensorDataset(samples[val:], labels[val:]),
    }


class Points(LightningDataModule):
    """2-D points around three well separated centres, one class each, generated with a fixed seed. The predict
    set is the first ``samples // 10`` points of the test set, without their labels."""

    num_classes = 3
    input_shape = (2,)
    centres = torch.tensor([[-3.0, 0.0], [3.0, 0.0], [0.0, 4.0]])

    def __init__(self, batch_size: int = 32, samples: int = 600, spread: float = 0.7) -> None:
        super().__init__()
        if samples < 30:
            raise ValueError(f"samples must be at least 30, got {samples}")
        self.batch_size = batch_size
        generator = torch.Generator().manual_seed(0)
        labels = torch.randint(0, self.num_classes, (samples,), generator=generator)
        points = self.centres[labels] + spread * torch.randn(samples, 2, generator=generator)
        self.sets = split(points, labels)
        self.sets["predict"] = TensorDataset(self.sets["test"].tensors[0][: samples // 10])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["test"], batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["predict"], batch_size=self.batch_size)


class TrainOnly(Points):
    """Points written for training only, as many a data module is: no predict_dataloader, no read_file."""

    predict_dataloader = LightningDataModule.predict_dataloader  # Lightning's own, which only refuses


class Positional(Points):
    """Points whose DataLoaders take their batch size by position, ``DataLoader(dataset, 32)``, as torch allows."""

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["predict"], self.batch_size)


class PointFiles(Points):
    """Points whose read_file reads a CSV of points, one per line, as a user's first version would: unchecked."""

    def read_file(self, path: Path) -> Tensor:
        return torch.tensor(np.loadtxt(path, delimiter=",", ndmin=2), dtype=torch.float32)


def colour_images(labels: Tensor, generator: torch.Generator) -> Tensor:
    """Noisy 3x32x32 images: class 0 red, 1 green, 2 blue, 3 white stripes on black."""
    images = 0.3 * torch.rand(len(labels), 3, 32, 32, generator=generator)
    for i, label in enumerate(labels.tolist()):
        if label < 3:
            images[i, label] += 0.6
        else:
            images[i, :, ::4] += 0.6
    return images


class TinyImages(LightningDataModule):
    """Small colour images of 4 classes, made in ``setup`` with a fixed seed; the predict set is the first 24 test
    images. predict.py also reads saved ones: a .pt or .npy file of [n, 3, 32, 32] or of one [3, 32, 32] image."""

    num_classes = 4
    input_shape = (3, 32, 32)

    def __init__(self, batch_size: int = 32, samples: int = 400) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.sets: dict[str, TensorDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        generator = torch.Generator().manual_seed(0)
        labels = torch.randint(0, self.num_classes, (self.hparams.samples,), generator=generator)
        self.sets = split(colour_images(labels, generator), labels)
        self.sets["predict"] = TensorDataset(self.sets["test"].tensors[0][:24])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["val"], batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["test"], batch_size=self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["predict"], batch_size=self.hparams.batch_size)

    def can_read(self, path: Path) -> bool:
        return Path(path).suffix in (".pt", ".npy")

    def read_file(self, path: Path) -> Tensor:
        """The images a .pt or .npy file holds, as model inputs [n, 3, 32, 32]."""
        path = Path(path)
        images = torch.from_numpy(np.load(path)) if path.suffix == ".npy" else torch.load(path, weights_only=True)
        images = images.float()
        if images.ndim == 3:  # one image
            images = images.unsqueeze(0)
        if tuple(images.shape[1:]) != self.input_shape:
            raise ValueError(f"expected images of shape {self.input_shape}, got {tuple(images.shape)}")
        return images


class TinyCNN(nn.Module):
    """One convolution, pooling, one linear layer: sized by the data module's input_shape and num_classes."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: int = 8) -> None:
        super().__init__()
        channels, rows, columns = input_shape
        self.features = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
        self.classifier = nn.Linear(width * (rows // 4) * (columns // 4), num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(self.features(images).flatten(1))


class MLP(nn.Module):
    """A hidden layer for samples of any shape, with dropout if asked (it draws from torch's random generator)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(), nn.Dropout(dropout)
        )
        self.layers.append(nn.Linear(hidden, num_classes))

    def forward(self, samples: Tensor) -> Tensor:
        return self.layers(samples)


class Unsized(LightningDataModule):
    """A data module that does not say what the model is built for (no num_classes, no input_shape)."""

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.zeros(8, 2), torch.zeros(8, dtype=torch.long)), self.batch_size)


class Unbatched(Points):
    """Takes no batch_size: the one setting every data module of this template shares."""

    def __init__(self, samples: int = 600) -> None:
        super().__init__(32, samples)


class Untested(Points):
    """No test_dataloader, though a run tests its model after training."""

    test_dataloader = LightningDataModule.test_dataloader  # Lightning's own, which only refuses


class Mislabelled(Points):
    """Batches that break what the data module says (``fault``): samples wider than input_shape or not float32, float
    labels, labels outside 0..num_classes-1, or dicts instead of (samples, labels) pairs. ``stage`` is the one
    affected."""

    def __init__(self, batch_size: int = 32, fault: str = "wide", stage: str = "train") -> None:
        super().__init__(batch_size)
        samples, labels = self.sets[stage].tensors
        faulty = {
            "wide": (torch.cat([samples, samples], dim=1), labels),
            "float": (samples, labels.float()),
            "unlabelled": (samples, labels.float().where(torch.arange(len(labels)) % 5 > 0, torch.nan)),  # NaN labels
            "high": (samples, labels + 1),
            "negative": (samples, labels - 1),
            "nan": (samples.where(torch.arange(len(samples))[:, None] % 7 > 0, torch.nan), labels),
            "double": (samples.double(), labels),  # torch.from_numpy of numpy's float64
            "integer": (samples.round().long(), labels),
            "late": (samples, torch.cat([labels[:32], labels[32:] + 3])),  # past the first batch of 32
        }
        if fault == "dict":
            self.sets[stage] = [{"x": x, "y": y} for x, y in zip(samples, labels, strict=True)]
        else:
            self.sets[stage] = TensorDataset(*faulty[fault])


class Broken(Points):
    """A mistake in one of its methods (``broken``): a DataLoader given both ``shuffle`` and a ``sampler``, which
    torch refuses; a file written where none can be (``prepare_data``); or (``predict_samples``) a predict set of
    samples wider than its input_shape."""

    def __init__(self, batch_size: int = 32, broken: str = "none") -> None:
        super().__init__(batch_size)
        self.broken = broken
        if broken == "__init__":  # a mistake of its own code, not a refused argument
            self.sets["train"].tensors[0][:, 5]
        if broken == "predict_samples":
            self.sets["predict"] = TensorDataset(torch.zeros(6, 5))

    def prepare_data(self) -> None:
        if self.broken == "prepare_data":  # its files, say, in a folder that cannot be
            Path("/proc/no/such/folder/points.npz").write_bytes(b"")

    def loader(self, stage: str, method: str) -> DataLoader:
        data, shuffle = self.sets[stage], stage == "train"
        if method == self.broken:
            return DataLoader(data, batch_size=self.batch_size, shuffle=True, sampler=SequentialSampler(data))
        return DataLoader(data, batch_size=self.batch_size, shuffle=shuffle)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", "train_dataloader")

    def val_dataloader(self) -> DataLoader:
        return self.loader("val", "val_dataloader")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test", "test_dataloader")

    def predict_dataloader(self) -> DataLoader:
        return self.loader("predict", "predict_dataloader")


class Empty(Points):
    """One of its sets (``empty``: train, val or test) holds no sample. (Its training set is read in order:
    shuffled, an empty one is refused by torch's RandomSampler, as a failing train_dataloader().)"""

    def __init__(self, batch_size: int = 32, empty: str = "none") -> None:
        super().__init__(batch_size)
        if empty in self.sets:
            self.sets[empty] = TensorDataset(*(tensor[:0] for tensor in self.sets[empty].tensors))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.batch_size)


class Generated(Points):
    """Points written to ``data_file`` by ``prepare_data`` (Lightning's place for a download or a generated file,
    called on one process) and read from it by ``setup``."""

    def __init__(self, batch_size: int = 32, data_file: str = "points.pt") -> None:
        super().__init__(batch_size)
        self.data_file = Path(data_file)

    def prepare_data(self) -> None:
        if not self.data_file.exists():
            torch.save(self.sets, self.data_file)

    def setup(self, stage: str) -> None:
        self.sets = torch.load(self.data_file, weights_only=False)
