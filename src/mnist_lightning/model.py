"""SimpleNN: the network itself, a plain ``nn.Module`` that knows nothing about Lightning or devices."""

from torch import Tensor, nn


class SimpleNN(nn.Module):
    """Flatten a 28x28 image and map it to 10 class scores with one linear layer."""

    def __init__(self, in_features: int = 28 * 28, num_classes: int = 10) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.linear(self.flatten(images))
