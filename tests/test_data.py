import pytest
import torch
from conftest import FAKE_TEST, FAKE_TRAIN, FAKE_VAL
from torch.utils.data import DistributedSampler
from torchvision import transforms
from torchvision.datasets import MNIST

from mnist_lightning.batches import TensorBatches, epoch_order, take
from mnist_lightning.datamodule import MNISTDataModule
from mnist_lightning.mnist import normalize, split_indices


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


def test_batches_are_uint8_until_normalized_on_transfer(fake_mnist):
    datamodule = make_datamodule(fake_mnist, batch_size=64)
    images, labels = next(iter(datamodule.train_dataloader()))
    assert (images.shape, images.dtype, labels.shape, labels.dtype) == (
        (64, 28, 28),
        torch.uint8,
        (64,),
        torch.int64,
    )
    normalized, same_labels = datamodule.on_after_batch_transfer((images, labels), 0)
    assert normalized.shape == (64, 1, 28, 28) and normalized.dtype == torch.float32
    assert same_labels is labels


def test_normalize_matches_torchvision_totensor_normalize(fake_mnist):
    dataset = MNIST(str(fake_mnist), train=False)
    classic = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    expected = torch.stack([classic(dataset[i][0]) for i in range(8)])
    torch.testing.assert_close(normalize(dataset.data[:8]), expected, atol=1e-5, rtol=0)


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
    labels = torch.arange(10)
    shards = [torch.cat([y for _, y in TensorBatches(labels, labels, 3, True, 0, 2, rank)]) for rank in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 5
    assert sorted(torch.cat(shards).tolist()) == list(range(10))


def test_per_sample_pipeline_serves_the_same_split(fake_mnist):
    fast = make_datamodule(fake_mnist, batch_size=50)
    slow = make_datamodule(fake_mnist, batch_size=50, pipeline="per_sample")
    fast_images = torch.cat([x for x, _ in fast.val_dataloader()])
    slow_images = torch.cat([x for x, _ in slow.val_dataloader()])
    assert slow_images.dtype == torch.uint8
    assert slow_images.squeeze(1).equal(fast_images)


def test_take_is_indexing_along_the_first_dimension():
    data = torch.arange(5 * 28 * 28, dtype=torch.int64).reshape(5, 28, 28).to(torch.uint8)
    indices = torch.tensor([4, 0, 0, 2])
    assert take(data, indices).equal(data[indices])
