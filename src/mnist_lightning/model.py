"""SimpleNN: the network itself, a plain ``nn.Module`` that knows nothing about Lightning or devices."""

import math

from torch import nn


class SimpleNN(nn.Module):
    """Flatten each sample and map it to one score per class with one linear layer.

    Every network of this project takes the shape of one sample and the number of classes first: the data module
    gives both.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.linear = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, images):
        return self.linear(images.flatten(1))  # each sample as one vector
