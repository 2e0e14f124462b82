"""The example's network (the Classifier's default ``net``, SimpleNN in the template): a plain ``nn.Module`` built
for the sizes the data module gives, mapping a batch to one score per class. Contracts only (shapes, the way it is
built): a project that rewrites the network keeps these tests green."""

import inspect
import subprocess
import sys

import example
import pytest
import torch

from mnist_lightning.core import classes
from mnist_lightning.core.cli import data_given

pytestmark = example.task


def default_network() -> type:
    """What the project's LightningModule builds when no --net is given."""
    return inspect.signature(classes.model_class()).parameters["net"].default


def data_sizes() -> tuple[tuple[int, ...], int]:
    """The shape of one sample and the number of classes, as the project's default data module gives them."""
    data = example.default_class(classes.DATA_MODULE)()
    sizes = [getattr(data, name) for name in data_given(classes.model_class())]
    assert len(sizes) == 2, "the example's task takes input_shape and num_classes from its data module"
    return tuple(sizes[0]), sizes[1]


@pytest.mark.parametrize("batch", [1, 5])
def test_the_default_network_maps_a_batch_to_one_score_per_class(batch):
    input_shape, num_classes = data_sizes()
    network = default_network()(input_shape, num_classes)
    assert isinstance(network, torch.nn.Module)
    with torch.no_grad():
        scores = network.eval()(torch.randn(batch, *input_shape))
    assert scores.shape == (batch, num_classes) and scores.dtype == torch.float32 and scores.isfinite().all()


def test_the_default_network_is_sized_by_the_data_and_trains():
    """Built for another class count, it gives that many scores; its gradients reach every weight."""
    input_shape, num_classes = data_sizes()
    network = default_network()(input_shape, num_classes + 3)
    samples = torch.randn(4, *input_shape)
    scores = network(samples)
    assert scores.shape == (4, num_classes + 3)
    torch.nn.functional.cross_entropy(scores, torch.arange(4) % (num_classes + 3)).backward()
    weights = [p for p in network.parameters() if p.requires_grad]
    assert weights and all(p.grad is not None for p in weights)


def test_the_default_network_takes_the_datas_sizes_first():
    """As the Classifier builds it, ``net(input_shape, num_classes)``, positionally, then its own options."""
    first_two = list(inspect.signature(default_network()).parameters.values())[:2]
    assert len(first_two) == 2 and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in first_two), first_two


@pytest.mark.slow
def test_the_network_does_not_import_lightning():
    """The network is a plain nn.Module: scripts without Lightning import it, and nothing of Lightning comes with it."""
    network = default_network()
    code = (
        f"import sys, {network.__module__};"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
