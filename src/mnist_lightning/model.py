"""SimpleNN: the network itself, a plain ``nn.Module`` that knows nothing about Lightning or devices."""

import math

from torch import Tensor, nn

# The same setting, applied the same way, on every rung (torch.set_float32_matmul_precision), so that they stay
# bit-identical; see the README's "GPU precision".
MATMUL_HELP = (
    "float32 matrix products: highest (full float32), high (TensorFloat32 on GPUs with Tensor Cores: faster, "
    "about 3 decimal digits per product) or medium (bfloat16)"
)


class SimpleNN(nn.Module):
    """Flatten each sample and map it to one score per class with one linear layer.

    Every network of this project takes the shape of one sample and the number of classes first: the data
    module knows both (``input_shape``, ``num_classes``), and the model builds the network with them.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.linear(self.flatten(images))


def compile_network(net: nn.Module) -> None:
    """``torch.compile`` the network in place, as every rung does with ``--compile true``.

    In place (``nn.Module.compile``), so its ``state_dict`` keeps its keys: ``torch.compile(net)`` would prefix
    them with ``_orig_mod.``. With dynamic batch sizes from the first call (``dynamic=True``, Lightning's advice for
    inputs whose shape changes, as a smaller last batch does): by default a network is compiled for the first
    batch's size and recompiled for any size seen later, so the code that trains it would depend on which batch
    came first, and the Trainer's sanity check runs two validation batches before the first training step.
    """
    net.compile(dynamic=True)
