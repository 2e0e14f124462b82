"""Checks made before training, so that a mistake ends in one message saying what to do, not in a traceback."""

import inspect
import os
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor, nn

from .errors import UserError

NETWORK_RULE = (
    "a network of this template takes the shape of one sample and the number of classes as its first two arguments "
    "and gives one score per class for each sample, e.g. MyNet(input_shape, num_classes, width=64)"
)


def check_network(net: nn.Module, samples: Tensor, num_classes: int) -> None:
    """Unless ``net`` maps ``samples`` to one score per class, a UserError now rather than at the first batch (an
    error raised by the network itself is the user's code's, shown with its traceback)."""
    name, training = type(net).__name__, net.training
    net.eval()  # no batch-norm statistics updated, no dropout drawn from the random generator
    try:
        with torch.no_grad():
            scores = net(samples)
    finally:
        net.train(training)
    expected = [len(samples), num_classes]
    if not isinstance(scores, Tensor) or list(scores.shape) != expected:
        got = list(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise UserError(
            f"The network {name} maps a batch of samples of shape {list(samples.shape)} to {got}; it must give "
            f"{expected}, one score per class for each sample: {NETWORK_RULE}."
        )
    if not any(parameter.requires_grad for parameter in net.parameters()):
        raise UserError(f"The network {name} has no trainable parameters: nothing to train.")


def check_schedule(config: Namespace) -> None:
    """No library can say this: the cosine schedule needs the run's length."""
    if config.max_epochs == -1 and config.max_steps in (None, -1) and config.lr_schedule == "cosine":
        raise UserError(
            "--max_epochs -1 trains without end, but the cosine schedule decays over the run's length: give "
            "--max_epochs or --max_steps, or pass --lr_schedule constant."
        )


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML and jsonargparse keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [self.construct_object(key_node, deep=deep) for key_node, _ in node.value]
        for index, key in enumerate(keys):
            if key in keys[:index]:
                mark = node.value[index][0].start_mark
                raise UserError(f"The config file {mark.name}, line {mark.line + 1}: {key} is set twice; keep one.")
        return super().construct_mapping(node, deep)


def read_config_file(path: str) -> Any:
    """A config file's content, refusing duplicate keys; jsonargparse reads it again and says what else is wrong."""
    try:
        with open(path, encoding="utf-8") as file:
            return yaml.load(file, UniqueKeyLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # jsonargparse's own message says what is wrong with it


def data_sizes(datamodule: LightningDataModule) -> dict[str, Any]:
    """The shape of one sample and the number of classes, which the data module says the model is built for."""
    shape, classes = getattr(datamodule, "input_shape", None), getattr(datamodule, "num_classes", None)
    valid_shape = isinstance(shape, tuple | list) and shape and all(isinstance(n, int) and n > 0 for n in shape)
    if not (valid_shape and isinstance(classes, int) and not isinstance(classes, bool) and classes >= 2):
        raise UserError(
            f"The data module {type(datamodule).__name__} must say what the model is built for: num_classes (an int, "
            "2 or more) and input_shape (the shape of one sample, a tuple of positive ints, e.g. (3, 32, 32)), as "
            f"attributes set by its __init__. It has num_classes={classes!r}, input_shape={shape!r}."
        )
    if "batch_size" not in inspect.signature(type(datamodule)).parameters:  # --batch_size is linked into it
        raise UserError(
            f"The data module {type(datamodule).__name__} must take batch_size, the top-level --batch_size that "
            "every data module shares: add a batch_size argument to its __init__ and give it to its DataLoaders."
        )
    return {"input_shape": list(shape), "num_classes": classes}


def check_testable(datamodule: LightningDataModule, tested: bool) -> None:
    """Lightning would find out only after the fit."""
    if tested and not is_overridden("test_dataloader", datamodule, LightningDataModule):
        name = type(datamodule).__name__
        raise UserError(
            f"The data module {name} has no test_dataloader(), which the run tests its best checkpoint on after "
            f"training: define test_dataloader(self) in {name}, or pass --limit_test_batches 0 not to test."
        )


def check_tested(trainer: Trainer) -> None:
    """After ``trainer.test``: an empty test set (Lightning would only warn, and report nothing)."""
    if trainer.limit_test_batches != 0 and not any(trainer.num_test_batches):
        raise UserError(
            f"The data module {type(trainer.datamodule).__name__} gave no test batch (its test_dataloader() is "
            "empty), so nothing could be tested: give it test samples, or pass --limit_test_batches 0 not to test."
        )


def check_batch(
    batch: Any,
    loader: str,
    datamodule: LightningDataModule,
    shape: tuple,
    classes: int,
    dtype: torch.dtype | None,
) -> None:
    """The first batch of the data module's ``loader`` against what it says, and samples of the weights' ``dtype``
    (None: any floating one, which autocast converts). Labels may be int64 or uint8: what cross_entropy takes."""
    got = None
    if isinstance(batch, dict):
        got = f"a dict (keys {', '.join(map(repr, batch))})"
    elif not (isinstance(batch, list | tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch)):
        got = f"a {type(batch).__name__}" + (f" of {len(batch)} items" if isinstance(batch, list | tuple) else "")
    elif tuple(batch[0].shape[1:]) != tuple(shape):
        got = f"samples of shape {tuple(batch[0].shape)}"
    elif not batch[0].is_floating_point() or batch[0].dtype != (dtype or batch[0].dtype):
        got = f"samples of {batch[0].dtype}"
    elif not bool(torch.isfinite(batch[0]).all()):
        got = "samples that are not finite (NaN or inf)"
    elif batch[1].dtype not in (torch.long, torch.uint8) or batch[1].shape != batch[0].shape[:1]:
        got = f"labels of {batch[1].dtype} and shape {tuple(batch[1].shape)}"
    elif len(batch[1]) and not (0 <= batch[1].min() and batch[1].max() < classes):
        got = f"labels from {int(batch[1].min())} to {int(batch[1].max())}"
    if got:
        name, kind = type(datamodule).__name__, str(dtype).removeprefix("torch.") if dtype else "floating-point"
        raise UserError(
            f"The data module {name} does not give what it says (input_shape {tuple(shape)}, num_classes {classes}): "
            f"the first batch of its {loader}() holds {got}, where a batch must be a (samples, labels) pair: finite "
            f"{kind} samples of shape (batch, {', '.join(map(str, shape))}), labels int64 class indices from 0 to "
            f"{classes - 1} of shape (batch,). Fix {loader}() or what {name} says."
        )


def check_launched(num_nodes: int) -> None:
    """A multi-node run alone on a machine would wait for the other nodes forever, deaf to Ctrl-C."""
    if (num_nodes or 1) > 1 and not {"WORLD_SIZE", "NODE_RANK", "SLURM_NTASKS"} & set(os.environ):
        raise UserError(
            f"--num_nodes {num_nodes} needs one process per machine, started by torchrun or srun (see the "
            "README's multi-node section); started alone, this process would wait for the others forever."
        )
