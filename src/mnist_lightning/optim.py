"""The learning-rate schedule of the LightningModule: a cosine decay over the run, which a resumed run may lengthen."""

import math

from torch.optim.lr_scheduler import CosineAnnealingLR


class RunLengthCosine(CosineAnnealingLR):
    """A cosine that keeps this run's length when it loads a checkpoint's state: resumed with a longer --max_epochs,
    it would reach zero at the old end, then climb. From the resumed step on, the learning rate is what a run
    planned this long from the start would have (so an extended finished run's rises)."""

    def load_state_dict(self, state_dict: dict) -> None:
        steps = self.T_max
        super().load_state_dict(state_dict)
        if self.T_max != steps:  # else the checkpoint's learning rate stands, to the bit
            self.T_max, progress = steps, min(self.last_epoch, steps) / steps
            for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
                group["lr"] = self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * progress)) / 2
