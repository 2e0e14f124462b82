import subprocess
import sys

import pytest
import torch

from mnist_lightning.model import SimpleNN


def test_simple_nn_maps_images_to_ten_scores():
    model = SimpleNN((1, 28, 28), 10)
    assert model(torch.zeros(4, 1, 28, 28)).shape == (4, 10)
    assert model(torch.zeros(4, 28, 28)).shape == (4, 10)


def test_simple_nn_is_one_linear_layer_on_the_flattened_samples():
    model = SimpleNN((1, 28, 28), 10)
    assert [type(m).__name__ for m in model.children()] == ["Linear"]
    assert sum(p.numel() for p in model.parameters()) == 784 * 10 + 10


def test_simple_nn_is_sized_by_the_data():
    model = SimpleNN((3, 8, 8), 4)  # e.g. small colour pictures of 4 classes
    assert model(torch.zeros(2, 3, 8, 8)).shape == (2, 4)
    assert sum(p.numel() for p in model.parameters()) == 3 * 8 * 8 * 4 + 4


def test_simple_nn_has_no_default_sizes():
    with pytest.raises(TypeError):
        SimpleNN()


@pytest.mark.slow
def test_the_network_does_not_import_lightning():
    """SimpleNN is a plain nn.Module: scripts without Lightning import it, and nothing of Lightning comes with it."""
    code = (
        "import sys, mnist_lightning.model;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
