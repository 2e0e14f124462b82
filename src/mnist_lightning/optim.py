"""The optimizer and learning-rate schedule of the Trainer rung, as the plain and Fabric scripts build them too."""

from collections.abc import Iterable
from typing import Literal

import torch
from torch import nn

OptimizerName = Literal["adam", "sgd"]
ScheduleName = Literal["cosine", "constant"]
LARGEST_LR = float(torch.finfo(torch.float32).max)  # the optimizers multiply float32 weights by it


def build_optimizer(
    parameters: Iterable[nn.Parameter], name: OptimizerName, lr: float, momentum: float, weight_decay: float
) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum; ``momentum`` is SGD's alone."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(parameters, lr, weight_decay=weight_decay)


def build_schedule(
    optimizer: torch.optim.Optimizer, name: ScheduleName, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per optimizer step: ``cosine`` decays to zero over ``total_steps``, ``constant`` keeps the lr."""
    if name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(total_steps, 1))
    return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
