"""MNISTDataModule: the split, model-ready batches from standard DataLoaders in and out of a Trainer, the other
datasets, the sizes it gives the model and the files it reads for predict.py."""

import os

import example
import pytest
import torch
import torchvision
from helpers import FAKE_TEST, FAKE_TRAIN, FAKE_VAL, write_fake_dataset, write_fake_mnist
from jsonargparse import ArgumentError
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import transforms
from torchvision.datasets import MNIST

from mnist_lightning import datamodule as mnist_data  # (names a data module of one's own may lack: read in tests)
from mnist_lightning.core.cli import build_parser
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.in_memory import normalize

pytestmark = example.data


def make_datamodule(root, **kwargs) -> MNISTDataModule:
    datamodule = MNISTDataModule(data_dir=str(root), val_size=FAKE_VAL, **kwargs)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def tensors_of(datamodule, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A split's inputs and labels, in its order, read in one batch."""
    dataset = datamodule.datasets[split]
    return next(iter(DataLoader(dataset, batch_size=len(dataset), collate_fn=tuple)))


def labels_of(datamodule, split: str) -> torch.Tensor:
    return tensors_of(datamodule, split)[1]


def test_split_sizes_and_no_overlap(fake_mnist):
    datamodule = make_datamodule(fake_mnist)
    sizes = {split: len(dataset) for split, dataset in datamodule.datasets.items()}
    assert sizes == {"train": FAKE_TRAIN - FAKE_VAL, "val": FAKE_VAL, "test": FAKE_TEST}
    train, val = (tensors_of(datamodule, split)[0].flatten(1) for split in ("train", "val"))
    assert not (train[:, None] == val[None]).all(-1).any()  # no image in both


def test_split_is_deterministic_and_independent_of_the_global_seed(fake_mnist):
    torch.manual_seed(1)
    first = labels_of(make_datamodule(fake_mnist), "val")
    torch.manual_seed(2)
    assert labels_of(make_datamodule(fake_mnist), "val").equal(first)
    assert not labels_of(make_datamodule(fake_mnist, split_seed=1), "val").equal(first)


def test_batches_are_model_ready_outside_a_trainer(fake_mnist):
    """A plain loop or a notebook gets what the model takes: float [B, 1, 28, 28], normalized, int64 labels."""
    datamodule = make_datamodule(fake_mnist, batch_size=64)
    for loader in (datamodule.train_dataloader(), datamodule.val_dataloader(), datamodule.test_dataloader()):
        images, labels = next(iter(loader))
        assert (images.shape, images.dtype, labels.shape, labels.dtype) == (
            (64, 1, 28, 28),
            torch.float32,
            (64,),
            torch.int64,
        )
        conv = torch.nn.Conv2d(1, 4, 3)  # a CNN takes them as they are
        assert conv(images).shape == (64, 4, 26, 26)


def test_normalize_matches_torchvision_totensor_normalize(fake_mnist):
    dataset = MNIST(str(fake_mnist), train=False)
    classic = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    expected = torch.stack([classic(dataset[i][0]) for i in range(8)])
    torch.testing.assert_close(normalize(dataset.data[:8], 0.1307, 0.3081), expected, atol=1e-5, rtol=0)


def test_batches_are_what_torchvisions_per_sample_pipeline_gives(fake_mnist):
    """The whole-batch reads give, batch for batch, what a DataLoader over torchvision's dataset with ToTensor and
    Normalize gives one sample at a time."""
    datamodule = make_datamodule(fake_mnist, batch_size=50)
    classic = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    per_sample = DataLoader(MNIST(str(fake_mnist), train=False, transform=classic), batch_size=50)
    for (images, labels), (expected, expected_labels) in zip(datamodule.test_dataloader(), per_sample, strict=True):
        torch.testing.assert_close(images, expected, atol=1e-6, rtol=0)
        assert labels.equal(expected_labels)


def test_train_batches_cover_the_split_once_per_epoch_in_a_new_order(fake_mnist):
    loader = make_datamodule(fake_mnist, batch_size=64).train_dataloader()
    assert len(loader) == -(-(FAKE_TRAIN - FAKE_VAL) // 64)
    epochs = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)  # what Lightning calls at the start of every epoch
        epochs.append(torch.cat([labels for _, labels in loader]))
    assert len(epochs[0]) == FAKE_TRAIN - FAKE_VAL
    assert not epochs[0].equal(epochs[1])
    assert epochs[0].sort().values.equal(epochs[1].sort().values)


def test_eval_batches_keep_their_order(fake_mnist):
    datamodule = make_datamodule(fake_mnist, batch_size=64)
    labels = torch.cat([labels for _, labels in datamodule.test_dataloader()])
    assert labels.equal(MNIST(str(fake_mnist), train=False).targets)


@pytest.mark.parametrize("epoch", [0, 3])
def test_the_training_order_depends_on_the_seed_and_the_epoch_alone(fake_mnist, monkeypatch, epoch):
    """What an exact resume relies on: a loader built anew, whatever the global random state, draws the same batches
    for the same epoch, in the order of a DistributedSampler with the same seed on one process."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "5")  # what seed_everything sets
    batches = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        loader = make_datamodule(fake_mnist, batch_size=64).train_dataloader()
        loader.sampler.set_epoch(epoch)  # what Lightning calls at the start of every epoch
        batches.append(torch.cat([images for images, _ in loader]))
    assert batches[0].equal(batches[1])
    reference = DistributedSampler(range(FAKE_TRAIN - FAKE_VAL), 1, 0, shuffle=True, seed=5)
    reference.set_epoch(epoch)
    assert list(loader.sampler) == list(reference)


def test_under_ddp_each_process_reads_its_share_of_the_same_order(fake_mnist, monkeypatch):
    monkeypatch.setenv("PL_GLOBAL_SEED", "5")
    datamodule = make_datamodule(fake_mnist)
    datamodule.trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)  # as rank 0 of two
    reference = DistributedSampler(range(FAKE_TRAIN - FAKE_VAL), 2, 0, shuffle=True, seed=5)
    assert list(datamodule.train_dataloader().sampler) == list(reference)


def test_the_training_order_follows_the_run_seed(fake_mnist, monkeypatch):
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")  # what seed_everything sets
    sampler = make_datamodule(fake_mnist).train_dataloader().sampler
    assert sampler.seed == 7


@pytest.mark.parametrize(("dataset", "folder"), [("fashion_mnist", "FashionMNIST"), ("kmnist", "KMNIST")])
def test_other_mnist_format_datasets_by_name(tmp_path, dataset, folder):
    """--dataset picks torchvision's class, its folder and its own normalization statistics."""
    write_fake_dataset(tmp_path, folder)
    datamodule = make_datamodule(tmp_path, dataset=dataset, batch_size=FAKE_TEST)
    images, _ = next(iter(datamodule.test_dataloader()))
    _, mean, std = mnist_data.DATASETS[dataset]
    parsed = mnist_data.DATASETS[dataset][0](str(tmp_path), train=False).data
    torch.testing.assert_close(images, normalize(parsed, mean, std))
    assert (datamodule.mean, datamodule.std) == (mean, std) != mnist_data.DATASETS["mnist"][1:]


@pytest.mark.parametrize(
    "flags",
    [["--data.val_size", "0"], ["--data.num_workers", "-1"], ["--data.dataset", "cifar10"], ["--batch_size", "0"]],
)
def test_the_data_modules_bounds_are_checked_by_the_parser(flags):
    with pytest.raises(ArgumentError, match=flags[0].split(".")[-1].lstrip("-")):
        build_parser().parse_args(flags)


def test_the_data_module_says_what_the_model_is_built_for(fake_mnist):
    datamodule = make_datamodule(fake_mnist, batch_size=64)
    images, _ = next(iter(datamodule.train_dataloader()))
    assert tuple(images.shape[1:]) == datamodule.input_shape == (1, 28, 28)
    assert datamodule.num_classes == 10 and int(labels_of(datamodule, "train").max()) < datamodule.num_classes


def test_a_validation_set_as_large_as_the_data_is_refused_before_training(fake_mnist):
    with pytest.raises(MisconfigurationException, match=f"--data.val_size must be between 1 and {FAKE_TRAIN - 1}"):
        MNISTDataModule(data_dir=str(fake_mnist), val_size=FAKE_TRAIN).prepare_data()


def test_prepare_data_checks_the_files_and_leaves_the_datasets_to_setup(fake_mnist):
    """Lightning runs prepare_data on one process: state it set would be missing on the others."""
    datamodule = MNISTDataModule(data_dir=str(fake_mnist), val_size=FAKE_VAL)
    before = dict(vars(datamodule))
    datamodule.prepare_data()
    assert vars(datamodule) == before and datamodule.datasets is None
    datamodule.setup("fit")
    assert datamodule.datasets is not None


def test_the_files_are_read_once_a_process_until_one_changes(tmp_path, monkeypatch):
    """Lightning calls prepare_data and setup for the fit and again for the test (and evaluate and predict load the
    data module again): one reading serves them all, and a file changed since is read (and checked) again."""
    reads, read = [], torchvision.datasets.mnist.read_image_file
    monkeypatch.setattr(torchvision.datasets.mnist, "read_image_file", lambda path: reads.append(path) or read(path))
    datamodule = MNISTDataModule(data_dir=str(write_fake_mnist(tmp_path)), val_size=FAKE_VAL)
    datamodule.prepare_data()
    datamodule.prepare_data()
    datamodule.setup("fit")
    MNISTDataModule(data_dir=str(tmp_path), val_size=FAKE_VAL).prepare_data()
    assert len(reads) == 2  # the training and the test images
    labels = tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:8] + bytes([77]) * FAKE_TEST)
    os.utime(labels, ns=(labels.stat().st_atime_ns, labels.stat().st_mtime_ns + 10**9))  # saved a second later
    with pytest.raises(MisconfigurationException, match="labels up to 77"):
        datamodule.prepare_data()


@pytest.mark.real_data
def test_a_read_only_folder_of_the_four_archives_is_read_without_writing_there(real_mnist, tmp_path, monkeypatch):
    """A shared dataset folder on a cluster: MNIST's four .gz archives, which torchvision extracts beside themselves
    before reading. Read-only there, they are read through a temporary copy: the folder stays as it was (issue 44,
    item 5). (The test tells the data module the folder is read-only: root may write anywhere.)"""
    from mnist_lightning import mnist_files

    shared = tmp_path / "shared"
    (shared / "MNIST" / "raw").mkdir(parents=True)
    for archive in (real_mnist / "MNIST" / "raw").glob("*.gz"):
        (shared / "MNIST" / "raw" / archive.name).write_bytes(archive.read_bytes())
    before = sorted(path.name for path in (shared / "MNIST" / "raw").iterdir())
    raw = str(shared / "MNIST" / "raw")
    monkeypatch.setattr(mnist_files.os, "access", lambda path, mode: str(path) != raw)
    mnist_files.parse.cache_clear()
    data = MNISTDataModule(str(shared), batch_size=1000)
    data.prepare_data()
    data.setup("fit")
    assert len(data.datasets["train"]) + len(data.datasets["val"]) == 60_000 and len(data.datasets["test"]) == 10_000
    assert (
        sorted(path.name for path in (shared / "MNIST" / "raw").iterdir())
        == before
        == sorted(
            f"{name}.gz"
            for name in (
                "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte",
                "train-images-idx3-ubyte",
                "train-labels-idx1-ubyte",
            )
        )
    )
