"""Data held in memory as tensors: read a whole batch at a time, shuffled in an order a resumed run repeats."""

import os
import warnings

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class InMemoryDataModule(LightningDataModule):
    """Serves ``self.datasets`` ("train", "val", "test"; the test set is also the predict set), which ``setup``
    fills with Samples (or Subsets of them), in batches of ``hparams.batch_size`` read by ``hparams.num_workers``."""

    datasets = None  # a dict, set by setup

    def train_dataloader(self):
        # A new order every epoch, drawn from seed + epoch (Lightning calls set_epoch), not from the global random
        # state, which checkpoints do not hold: a resumed run draws the same batches.
        return self._loader("train", DistributedSampler, shuffle=True, seed=int(os.getenv("PL_GLOBAL_SEED", 0)))

    def val_dataloader(self):
        return self._loader("val")

    def test_dataloader(self):
        # Under DDP, every sample once: Lightning's DistributedSampler would repeat a few to give each process as many
        # (and warns that the test metrics count them twice).
        return self._loader("test", UnrepeatedDistributedSampler, shuffle=False)

    predict_dataloader = test_dataloader

    def _loader(self, split, sampler=None, **sampling):
        # Worker processes would only copy batches already in memory: Lightning's advice to add some counts cores,
        # not data, and is silenced as its docs say (advanced/warnings), as Lightning asks for this loader.
        warnings.filterwarnings("ignore", ".*Consider increasing the value of the `num_workers` argument*")
        ranks = (self.trainer and self.trainer.distributed_sampler_kwargs) or {"num_replicas": 1, "rank": 0}
        data, workers = self.datasets[split], self.hparams.num_workers
        sampler = sampler and sampler(data, **ranks, **sampling)  # each process its share
        options = {"collate_fn": tuple, "num_workers": workers, "persistent_workers": workers > 0}  # tuple: see Samples
        return DataLoader(data, batch_size=self.hparams.batch_size, sampler=sampler, **options)


def normalize(images, mean, std):
    """uint8 images [N, H, W] -> float [N, 1, H, W]: torchvision's ToTensor and Normalize, on all at once."""
    return images.unsqueeze(1).float().div_(255).sub_(mean).div_(std)  # in place: no second full-size buffer


def normalize_spec(mean: float, std: float) -> dict:
    """What :func:`normalize` does, for export's preprocessing.json: a server makes model inputs so."""
    return {"normalize": {"mean": mean, "std": std, "formula": "(uint8 / 255 - mean) / std"}}


class Samples(TensorDataset):
    """A TensorDataset that a DataLoader reads a batch at a time (``__getitems__``): one indexing operation, not a
    Python call per sample; its batches come stacked (its DataLoader takes ``collate_fn=tuple``)."""

    def __getitems__(self, indices):
        index = np.fromiter(indices, np.int64, len(indices))  # torch.tensor(list) is slower
        # numpy's indexing, not torch's: torch's is a parallel region whose idle OpenMP threads then spin on every core
        return tuple(torch.from_numpy(tensor.numpy()[index]) for tensor in self.tensors)
