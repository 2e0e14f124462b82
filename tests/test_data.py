"""data.py and MNISTDataModule: the split, model-ready batches in and out of a Trainer, the other datasets, the
sizes it gives the model and the files it reads for predict.py."""

import gzip

import pytest
import torch
from helpers import FAKE_TEST, FAKE_TRAIN, FAKE_VAL, write_fake_dataset
from PIL import Image
from torch.utils.data import DistributedSampler
from torchvision import transforms
from torchvision.datasets import MNIST

from mnist_lightning.data import DATASETS, TensorBatches, epoch_order, normalize, split_indices
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.digit_files import UnreadableFile
from mnist_lightning.errors import NothingToPredict


def make_datamodule(root, **kwargs) -> MNISTDataModule:
    datamodule = MNISTDataModule(data_dir=str(root), val_size=FAKE_VAL, **kwargs)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def test_split_sizes_and_no_overlap(fake_mnist):
    datamodule = make_datamodule(fake_mnist)
    sizes = {split: len(labels) for split, (_, labels) in datamodule.splits.items()}
    assert sizes == {"train": FAKE_TRAIN - FAKE_VAL, "val": FAKE_VAL, "test": FAKE_TEST}
    train_idx, val_idx = datamodule.split_indices["train"], datamodule.split_indices["val"]
    assert len(set(train_idx.tolist()) | set(val_idx.tolist())) == FAKE_TRAIN


def test_full_mnist_split_is_55000_5000():
    train_idx, val_idx = split_indices(60_000, 5_000, seed=0)
    assert (len(train_idx), len(val_idx)) == (55_000, 5_000)
    assert torch.cat([train_idx, val_idx]).sort().values.equal(torch.arange(60_000))


def test_split_is_deterministic_and_independent_of_the_global_seed():
    torch.manual_seed(1)
    first = split_indices(1000, 100, seed=0)
    torch.manual_seed(2)
    second = split_indices(1000, 100, seed=0)
    assert all(a.equal(b) for a, b in zip(first, second, strict=True))
    assert not split_indices(1000, 100, seed=1)[1].equal(first[1])


@pytest.mark.parametrize("pipeline", ["tensor", "per_sample"])
def test_batches_are_model_ready_outside_a_trainer(fake_mnist, pipeline):
    """A plain loop or a notebook gets what the model takes: float [B, 1, 28, 28], normalized, int64 labels."""
    datamodule = make_datamodule(fake_mnist, batch_size=64, pipeline=pipeline)
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


def test_both_pipelines_serve_the_same_batches(fake_mnist):
    fast = make_datamodule(fake_mnist, batch_size=50)
    slow = make_datamodule(fake_mnist, batch_size=50, pipeline="per_sample")
    for split in ("val_dataloader", "test_dataloader"):
        fast_images, fast_labels = map(torch.cat, zip(*getattr(fast, split)(), strict=True))
        slow_images, slow_labels = map(torch.cat, zip(*getattr(slow, split)(), strict=True))
        torch.testing.assert_close(fast_images, slow_images, atol=1e-5, rtol=0)
        assert fast_labels.equal(slow_labels)


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
    assert labels.equal(datamodule.splits["test"][1])


@pytest.mark.parametrize("count", [1, 7, 100])
@pytest.mark.parametrize("replicas", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_epoch_order_equals_distributed_sampler(count, replicas, shuffle, drop_last):
    for rank in range(replicas):
        sampler = DistributedSampler(range(count), replicas, rank, shuffle=shuffle, seed=5, drop_last=drop_last)
        sampler.set_epoch(3)
        assert epoch_order(sampler).tolist() == list(sampler)


def test_ranks_get_disjoint_shards_that_cover_the_data():
    images, labels = torch.zeros(10, 28, 28, dtype=torch.uint8), torch.arange(10)
    shards = [
        torch.cat([y for _, y in TensorBatches(images, labels, 3, 0.0, 1.0, True, 0, 2, rank)]) for rank in (0, 1)
    ]
    assert len(shards[0]) == len(shards[1]) == 5
    assert sorted(torch.cat(shards).tolist()) == list(range(10))


@pytest.mark.parametrize(("dataset", "folder"), [("fashion_mnist", "FashionMNIST"), ("kmnist", "KMNIST")])
def test_other_mnist_format_datasets_by_name(tmp_path, dataset, folder):
    """--dataset picks torchvision's class, its folder and its own normalization statistics."""
    write_fake_dataset(tmp_path, folder)
    datamodule = make_datamodule(tmp_path, dataset=dataset, batch_size=FAKE_TEST)
    images, _ = next(iter(datamodule.test_dataloader()))
    raw = datamodule.splits["test"][0]
    info = DATASETS[dataset]
    torch.testing.assert_close(images, normalize(raw, info.mean, info.std))
    assert (datamodule.mean, datamodule.std) == (info.mean, info.std) != (DATASETS["mnist"].mean, DATASETS["mnist"].std)


@pytest.mark.parametrize(
    "settings",
    [{"batch_size": 0}, {"val_size": 0}, {"num_workers": -1}, {"num_workers": 10_000}, {"dataset": "cifar10"}],
)
def test_bad_settings_are_refused_in_the_data_modules_own_terms(settings):
    with pytest.raises(ValueError, match=next(iter(settings))):
        MNISTDataModule(**settings)


def test_the_data_module_says_what_the_model_is_built_for(fake_mnist):
    datamodule = make_datamodule(fake_mnist, batch_size=64)
    images, _ = next(iter(datamodule.train_dataloader()))
    assert tuple(images.shape[1:]) == datamodule.input_shape == (1, 28, 28)
    assert datamodule.num_classes == 10 and int(datamodule.splits["train"][1].max()) < datamodule.num_classes


def test_read_file_gives_model_inputs_from_idx_files_and_pictures(fake_mnist, tmp_path):
    """What predict.py hands each file to: the test set's IDX file reads as the test batches do; a picture of a
    digit gives one input; a blank picture is NothingToPredict, a file that is no picture says why."""
    datamodule = make_datamodule(fake_mnist, batch_size=FAKE_TEST)
    test_images, _ = next(iter(datamodule.test_dataloader()))
    idx = fake_mnist / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    torch.testing.assert_close(datamodule.read_file(idx), test_images)
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx.read_bytes()))
    torch.testing.assert_close(datamodule.read_file(tmp_path / "t10k-images-idx3-ubyte.gz"), test_images)
    Image.fromarray(datamodule.splits["test"][0][0].numpy()).save(tmp_path / "digit.png")
    picture = datamodule.read_file(tmp_path / "digit.png")
    assert (picture.shape, picture.dtype) == ((1, *datamodule.input_shape), torch.float32)
    Image.new("L", (40, 40), 255).save(tmp_path / "blank.png")
    with pytest.raises(NothingToPredict):
        datamodule.read_file(tmp_path / "blank.png")
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(UnreadableFile, match="not an image that Pillow can read"):
        datamodule.read_file(tmp_path / "notes.png")
    (tmp_path / "notes.txt").write_text("not a picture either")
    read = sorted(path.name for path in tmp_path.iterdir() if datamodule.can_read(path))
    assert read == ["blank.png", "digit.png", "notes.png", "t10k-images-idx3-ubyte.gz"]


def test_the_preprocessing_it_describes_is_its_own_normalization():
    spec = MNISTDataModule(dataset="kmnist").preprocessing()  # for export's preprocessing.json
    assert (spec["normalize"]["mean"], spec["normalize"]["std"]) == (DATASETS["kmnist"].mean, DATASETS["kmnist"].std)
    assert spec["from_picture"]["steps"] and "from_mnist_digit" in spec
