"""Checks made before training, so that a mistake ends in one message saying what to do, not in a traceback."""

import inspect
import os
from contextlib import suppress
from typing import Any, Protocol

import torch
import yaml
from jsonargparse import get_loader
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.utilities.model_helpers import is_overridden

from .errors import UserError

PARSER_YAML = get_loader("yaml")  # jsonargparse's own YAML reading, which load_yaml adds its checks to


class DataContract(Protocol):
    """What every data module of this template (``--data``) gives the machinery, checked before training.

    It takes ``batch_size``, the top-level ``--batch_size``, in its ``__init__``. It says what the model is built for
    as attributes: ``input_shape``, the shape of one sample (a tuple of positive ints, e.g. ``(3, 32, 32)``), and
    ``num_classes`` (an int, 2 or more). Its DataLoaders give ``(samples, labels)`` batches: finite float samples of
    shape ``(batch, *input_shape)`` (float32, or the weights' dtype with a ``-true`` precision) and int64 labels from
    0 to ``num_classes - 1``; Lightning moves them to the device.
    """

    batch_size: int
    input_shape: tuple[int, ...]
    num_classes: int


def data_sizes(datamodule: DataContract) -> dict[str, Any]:
    """The sizes the data module says the model is built for."""
    shape, classes = getattr(datamodule, "input_shape", None), getattr(datamodule, "num_classes", None)
    batched = "batch_size" in inspect.signature(type(datamodule)).parameters  # --batch_size is linked into it
    if not (isinstance(shape, tuple | list) and isinstance(classes, int) and classes >= 2 and batched):
        raise UserError(
            f"The data module {type(datamodule).__name__} must take batch_size and set input_shape (a tuple) and "
            f"num_classes (2 or more), as checks.DataContract says: it has {shape!r} and {classes!r}."
        )
    return {"input_shape": list(shape), "num_classes": classes}


def check_network(net: torch.nn.Module, samples: torch.Tensor, num_classes: int) -> None:
    """Unless ``net`` maps ``samples`` to one score per class, a UserError now rather than at the first batch (an
    error raised by the network itself is the user's code's, shown with its traceback)."""
    with torch.no_grad():
        scores = net.eval()(samples)  # eval: no batch-norm statistics updated, no dropout drawn
    net.train()  # as it was built
    got = list(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
    if got != [len(samples), num_classes]:
        name = type(net).__name__
        raise UserError(f"The network {name} maps {list(samples.shape)} to {got}, not to {num_classes} scores each.")


def check_schedule(config: Any) -> None:
    """No library can say this: the cosine schedule needs the run's length."""
    if config.max_epochs == -1 and config.max_steps == -1 and config.lr_schedule == "cosine":
        raise UserError("--max_epochs -1 gives the cosine schedule no end: give --max_steps or --lr_schedule constant.")


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
