"""The optimizer and learning-rate schedule of the LightningModule, as functions any training script can call."""
# The plain and Fabric rungs build theirs with them too.  # only with_ladder

import math
from typing import Literal

import torch
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LRScheduler

OptimizerName = Literal["adam", "sgd"]
ScheduleName = Literal["cosine", "constant"]


def build_optimizer(parameters, name: OptimizerName, lr: float, momentum: float, weight_decay: float):
    if name == "sgd":
        return torch.optim.SGD(parameters, lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(parameters, lr, weight_decay=weight_decay)  # momentum is SGD's alone


def build_schedule(optimizer: torch.optim.Optimizer, name: ScheduleName, total_steps: int) -> LRScheduler:
    """Stepped once per optimizer step: ``cosine`` decays to zero over ``total_steps``, ``constant`` keeps the lr."""
    if name == "cosine":
        return RunLengthCosine(optimizer, T_max=max(total_steps, 1))
    return ConstantLR(optimizer, factor=1.0, total_iters=0)


def configure(parameters, hparams, total_steps: int) -> dict:
    """What ``configure_optimizers`` returns: the optimizer and schedule that ``hparams`` name."""
    optimizer = build_optimizer(parameters, hparams.optimizer, hparams.lr, hparams.momentum, hparams.weight_decay)
    schedule = build_schedule(optimizer, hparams.lr_schedule, total_steps)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class RunLengthCosine(CosineAnnealingLR):
    """A cosine that keeps this run's length when it loads a checkpoint's state: resumed with a longer --max_epochs,
    it would reach zero at the old end, then climb. From the resumed step on, the learning rate is what a run
    planned this long from the start would have (so an extended finished run's rises)."""

    def load_state_dict(self, state_dict: dict) -> None:
        steps = self.T_max
        super().load_state_dict(state_dict)
        if self.T_max != steps:
            self.T_max, progress = steps, min(self.last_epoch, steps) / steps
            for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
                group["lr"] = self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * progress)) / 2
