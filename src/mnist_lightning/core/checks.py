"""Checks made before training, so that a mistake ends in one message saying what to do, not in a traceback."""

import os
from contextlib import suppress
from typing import Any, Protocol

import yaml
from jsonargparse import get_loader
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.utilities.model_helpers import is_overridden

from .errors import UserError

PARSER_YAML = get_loader("yaml")  # jsonargparse's own YAML reading, which load_yaml adds its checks to


class DataContract(Protocol):
    """What every data module of this template (``--data``) gives the machinery, checked before training.

    It takes ``batch_size``, the top-level ``--batch_size``, in its ``__init__``, and has as attributes what the
    LightningModule takes from it: its arguments without a default (the example's ``input_shape`` and
    ``num_classes``). Its DataLoaders give ``(samples, targets)`` batches (or samples alone, to predict) whose samples
    are finite and fit the LightningModule's ``example_input_array`` (of its dtype: float32, or the weights' dtype
    with a ``-true`` precision); what targets are is the LightningModule's task. Lightning moves them to the device.
    """

    batch_size: int


def check_launched(num_nodes: int) -> None:
    """A multi-node run alone on a machine would wait for the other nodes forever, deaf to Ctrl-C."""
    if num_nodes > 1 and not {"WORLD_SIZE", "NODE_RANK", "SLURM_NTASKS"} & set(os.environ):
        raise UserError(f"--num_nodes {num_nodes} needs one process per machine, started by torchrun or srun.")


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML and jsonargparse keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        for index, (key, _) in enumerate(node.value):  # the keys as written
            if key.value in [earlier.value for earlier, _ in node.value[:index]]:
                raise UserError(f"{self.name}, line {key.start_mark.line + 1}: {key.value} is set twice.")
        return super().construct_mapping(node, deep)


def load_yaml(text: str, path: str = "") -> Any:
    """jsonargparse's YAML loader (``set_loader``), refusing in a config file what it would take silently."""
    if path:  # a config file, not a flag's value
        loader = UniqueKeyLoader(text)
        loader.name = str(path)
        content = loader.get_single_data()
        with suppress(LookupError, TypeError):  # (a file without data: init_args:)
            if "batch_size" in content["data"]["init_args"]:
                raise UserError(batch_size_refused(f"batch_size under data: init_args: in {path}"))
    return PARSER_YAML(text)


def batch_size_refused(where: str) -> str:
    return f"{where}: the batch size is the top-level --batch_size, which every data module is given; give it there."


def check_testable(datamodule: LightningDataModule, tested: bool) -> None:
    """Lightning would find out only after the fit."""
    if tested and not is_overridden("test_dataloader", datamodule):
        raise UserError(
            f"{type(datamodule).__name__} has no test_dataloader(): define one, or pass --limit_test_batches 0."
        )


def check_tested(trainer: Trainer) -> None:
    """After ``trainer.test``: an empty test set (Lightning would only warn, and report nothing)."""
    if trainer.limit_test_batches != 0 and not any(trainer.num_test_batches):
        raise no_batch(trainer, "test")


def no_batch(trainer: Trainer, loader: str) -> UserError:
    """An empty DataLoader (Lightning skips its stage, or only warns) named in one sentence."""
    return UserError(f"{type(trainer.datamodule).__name__}.{loader}_dataloader() gave no batch: give it samples.")
