"""Checks made before training, so that a mistake ends in one message saying what to do, not in a traceback."""

import difflib
import inspect
import math
import operator
import os
import pydoc
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import torch
import yaml
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.core.mixins import HyperparametersMixin
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor, nn

from .errors import UserError
from .messages import closest, either, first_line

BOUNDS = {
    ">": ("above", operator.gt),
    ">=": ("at least", operator.ge),
    "<": ("below", operator.lt),
    "<=": ("at most", operator.le),
}


class ModelSettingError(ValueError):
    """A setting of the Classifier (or the data module) that cannot work."""


class NetworkMismatchError(ModelSettingError):
    """The network cannot take the data's samples, or does not give one score per class for each."""


def check_hyperparameters(module: HyperparametersMixin) -> None:
    """Each hyperparameter against its ``__init__`` annotation (a ``Literal``'s choices, an ``Annotated``'s bounds),
    for a module built in Python (not jsonargparse's PositiveFloat: its instances would be pickled in checkpoints)."""
    for name, kind in module.__init__.__annotations__.items():
        value = module.hparams.get(name)
        if get_origin(kind) is Literal and value not in get_args(kind):
            raise ModelSettingError(f"{name} must be one of {', '.join(map(repr, get_args(kind)))}, got {value!r}")
        if problem := bound_problem(name, value, kind):
            raise ModelSettingError(problem)


def bound_problem(name: str, value: Any, kind: Any) -> str | None:
    """What is wrong with ``value`` under the bounds of an ``Annotated[float, "> 0", "<= 1"]``, or None."""
    bounds = [text.split() for text in get_args(kind)[1:]] if get_origin(kind) is Annotated else []
    if not bounds or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if not math.isfinite(value):  # YAML's .nan would pass a lower bound silently
        return f"{name} {value} is not a finite number"
    if all(BOUNDS[comparison][1](value, float(bound)) for comparison, bound in bounds):
        return None
    return f"{name} {value} is out of range: it must be {' and '.join(f'{BOUNDS[c][0]} {b}' for c, b in bounds)}"


def check_network(net: nn.Module, samples: Tensor, num_classes: int) -> None:
    """Raise a NetworkMismatchError, in the network's terms, unless ``net`` maps ``samples`` to one score per class."""
    if num_classes < 2 or samples.dim() < 2 or 0 in samples.shape:
        raise ModelSettingError(
            f"the data must have 2 classes or more and samples of a positive shape, got {num_classes} classes of "
            f"shape {tuple(samples.shape[1:])}"
        )
    name, training = type(net).__name__, net.training
    net.eval()  # no batch-norm statistics updated, no dropout drawn from the random generator
    try:
        with torch.no_grad():
            scores = net(samples)
    except Exception as error:
        raise NetworkMismatchError(
            f"the network {name} cannot take a batch of samples of shape {list(samples.shape)}: "
            f"{str(error).strip() or type(error).__name__}"
        ) from error
    finally:
        net.train(training)
    expected = [len(samples), num_classes]
    if not isinstance(scores, Tensor) or list(scores.shape) != expected:
        got = list(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise NetworkMismatchError(
            f"the network {name} maps a batch of samples of shape {list(samples.shape)} to {got}; it must give "
            f"{expected}, one score per class for each sample"
        )
    if not any(parameter.requires_grad for parameter in net.parameters()):
        raise NetworkMismatchError(f"the network {name} has no trainable parameters: nothing to train")


def between(lowest: int, highest: int | None = None) -> tuple[Callable[[Any], bool], str]:
    rule = f"it must be at least {lowest}" if highest is None else f"it must be between {lowest} and {highest}"
    return (lambda value: lowest <= value <= (highest or value)), rule


# Valid ranges of numeric options that nothing checks before training starts (Lightning's loops would end in a
# ZeroDivisionError, numpy's seeding in a ValueError): whether a value is valid, and the rule said when it is not.
RANGES = {"seed": between(0, 2**32 - 1), "max_epochs": between(-1), "min_epochs": between(0)}
RANGES |= {"max_steps": between(-1), "min_steps": between(0), "accumulate_grad_batches": between(1)}
RANGES |= {"check_val_every_n_epoch": between(1), "log_every_n_steps": between(1), "num_nodes": between(1)}
RANGES |= {"num_sanity_val_steps": between(-1), "reload_dataloaders_every_n_epochs": between(0)}
RANGES |= {"gradient_clip_val": between(0)}
BATCH_LIMIT = (  # a fraction of the batches (a float) or a number of batches (an int)
    lambda value: 0 <= value <= 1 if isinstance(value, float) else value >= 0,
    "it takes a fraction of the batches from 0.0 to 1.0, or a number of batches (a whole number, 0 or more)",
)
RANGES |= dict.fromkeys(("limit_train_batches", "limit_val_batches", "limit_test_batches"), BATCH_LIMIT)
RANGES |= dict.fromkeys(("limit_predict_batches", "overfit_batches"), BATCH_LIMIT)
RANGES["val_check_interval"] = (
    lambda value: value > 0 and (isinstance(value, int) or value <= 1),  # nan too
    "it takes a fraction of an epoch above 0.0 (up to 1.0), or a number of training batches (1 or more)",
)


def check_ranges(config: Namespace, model: type) -> None:
    """Every setting Lightning would refuse only later (or never), with the bounds ``model`` (whose arguments are
    top-level options) and the data module annotate their arguments with."""
    data = config.get("data")
    owners = [(model, "--", config)]
    if isinstance(data, Namespace) and isinstance(data_class := pydoc.locate(data.get("class_path", "")), type):
        owners.append((data_class, "--data.", data.get("init_args") or Namespace()))
    for owner, prefix, values in owners:
        for name, kind in owner.__init__.__annotations__.items():
            flag = "--batch_size" if name == "batch_size" else prefix + name  # linked into the data module
            if name in values and (problem := bound_problem(flag, values[name], kind)):
                raise UserError(f"{problem}.")
    for name, (valid, rule) in RANGES.items():
        value = config.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and not valid(value):
            raise UserError(f"--{name} {value} is out of range: {rule}.")
    if config.max_epochs == -1 and config.max_steps in (None, -1) and config.lr_schedule == "cosine":
        raise UserError(
            "--max_epochs -1 trains without end, but the cosine schedule decays over the run's length: give "
            "--max_epochs or --max_steps, or pass --lr_schedule constant."
        )
    if None not in (config.min_epochs, config.max_epochs) and 0 <= config.max_epochs < config.min_epochs:
        raise UserError(
            f"--min_epochs {config.min_epochs} is above --max_epochs {config.max_epochs}, which stops training first."
        )
    if str(config.precision) in ("16", "16-true") and config.lr > torch.finfo(torch.float16).max:
        raise UserError(
            f"--lr {config.lr} does not fit the 16-bit weights of --precision {config.precision} (at most "
            f"{torch.finfo(torch.float16).max:g}). Use a smaller --lr or another --precision."
        )
    if config.get("max_time") is not None:
        try:
            Timer(duration=config.max_time)
        except (MisconfigurationException, ValueError) as error:
            raise UserError(
                f"--max_time {config.max_time} is not a duration: it takes days:hours:minutes:seconds, e.g. "
                "00:01:30:00 for an hour and a half."
            ) from error


class DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [self.construct_object(key_node, deep=deep) for key_node, _ in node.value]
        for index, key in enumerate(keys):
            if key in keys[:index]:
                raise DuplicateKeyError(None, None, f"{key} is set twice", node.value[index][0].start_mark)
        return super().construct_mapping(node, deep)


def check_config_file(path: Path, options: list[str]) -> dict:
    """A config file's options, read before the parser to name each mistake with the file and line (jsonargparse says
    "<unicode string>", and only "Unexpected config" for an empty file)."""
    if not path.is_file():
        problem = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"The config file {path} {problem}. Pass a YAML file, e.g. --config configs/default.yaml.")
    try:
        content = yaml.load(path.read_text(), UniqueKeyLoader)
    except UnicodeDecodeError as error:
        raise UserError(f"The config file {path} is not a text file: {error.reason}.") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        if isinstance(error, DuplicateKeyError):
            raise UserError(f"The config file {where}: {error.problem}. Keep one of its lines.") from error
        raise UserError(
            f"The config file {where}, is not valid YAML: {getattr(error, 'problem', None) or error}. A config "
            "file holds `option: value` lines, e.g. `max_epochs: 20`."
        ) from error
    example = "`python scripts/train.py --print_config` prints every option as a config file"
    if not isinstance(content, dict):
        holds = "no options (it is empty, or only comments)" if content is None else f"a {type(content).__name__}"
        raise UserError(f"The config file {path} holds {holds}, not `option: value` lines; {example}.")
    unknown = [str(key) for key in content if key not in options]
    if {"trainer", "model"} & set(unknown):
        raise UserError(
            f"The config file {path} has LightningCLI's sections (trainer:, model:); this template's config is flat: "
            f"every option at the top level (max_epochs: 20, lr: 0.01), the data module under data:. {example}."
        )
    if unknown:
        close = {key: closest(key, sorted(options)) for key in unknown}
        guesses = [f"{key} (did you mean {either(close[key])}?)" if close[key] else key for key in unknown]
        raise UserError(f"The config file {path} sets options that do not exist: {', '.join(guesses)}; {example}.")
    return content


def check_monitors(callbacks: list, model: LightningModule) -> None:
    """A callback monitoring a metric the model does not log (Lightning would find out after an epoch)."""
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor not in model.monitorable and not monitor.startswith("lr-"):
            close = difflib.get_close_matches(monitor, model.monitorable, 1, 0.5)
            raise UserError(
                f"{type(callback).__name__} monitors {monitor!r}, which the model does not log"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; it logs {', '.join(model.monitorable)} during training (--callbacks.monitor NAME)."
            )


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


def check_data_methods(datamodule: LightningDataModule, tested: bool) -> None:
    """The loaders a run reads: training's, and the test set's that it is tested on after training."""
    needed = {"train_dataloader": "training reads its batches from"}
    if tested:
        needed["test_dataloader"] = "the run tests its best checkpoint on, after training"
    name, without = type(datamodule).__name__, {"test_dataloader": " (or --limit_test_batches 0 not to test)"}
    for method, use in needed.items():
        if not is_overridden(method, datamodule, LightningDataModule):
            raise UserError(
                f"The data module {name} has no {method}(), which {use}: define {method}(self) in {name}, returning "
                f"a DataLoader of (samples, labels) batches{without.get(method, '')}."
            )


DATA_HOOKS = ("prepare_data", "setup", "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


@contextmanager
def data_module_errors(datamodule: LightningDataModule) -> Iterator[None]:
    """An error raised in the data module's own methods as one paragraph naming the method and its line, not a
    traceback through Lightning's loops; and a step's error on a batch that breaks what it says (BatchCheck)."""
    try:
        yield
    except Exception as error:
        if problem := getattr(error, "batch_problem", None):
            raise problem from error
        frames = list(traceback.walk_tb(error.__traceback__))
        ours = [(f, n) for f, n in frames if f.f_code.co_name in DATA_HOOKS and f.f_locals.get("self") is datamodule]
        if isinstance(error, UserError) or not ours:
            raise
        (frame, line), (inner, inner_line) = ours[-1], frames[-1]
        name, method, where = type(datamodule).__name__, frame.f_code.co_name, f"{frame.f_code.co_filename}:{line}"
        if inner is not frame:
            where += f", raised at {inner.f_code.co_filename}:{inner_line}"
        raise UserError(
            f"The data module {name} failed in its {method}() ({where}): {first_line(error)} "
            f"({type(error).__name__}). Fix {method}() in {name}.",
            exit_code=1,
        ) from error


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
    which: str = "the first batch",
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
            f"{which} of its {loader}() holds {got}, where a batch must be a (samples, labels) pair: finite "
            f"{kind} samples of shape (batch, {', '.join(map(str, shape))}), labels int64 class indices from 0 to "
            f"{classes - 1} of shape (batch,). Fix {loader}() or what {name} says."
        )


def refuse_empty_training(config: Namespace) -> None:
    """Settings under which not one training step is taken: the run would test an untrained model."""
    zero = [
        f"--{name} {config[name]}" for name in ("max_epochs", "max_steps", "limit_train_batches") if config[name] == 0
    ]
    if config.max_time is not None and Timer(duration=config.max_time).time_remaining() <= 0:
        zero.append(f"--max_time {config.max_time}")
    if zero:
        raise UserError(
            f"{' and '.join(zero)} trains nothing, so there would be no trained model to test. Give it a positive "
            "value (or leave it out for the default); to test a model you have, use scripts/evaluate.py."
        )


def check_launched(num_nodes: int) -> None:
    """A multi-node run alone on a machine would wait for the other nodes forever, deaf to Ctrl-C."""
    if (num_nodes or 1) > 1 and not {"WORLD_SIZE", "NODE_RANK", "SLURM_NTASKS"} & set(os.environ):
        raise UserError(
            f"--num_nodes {num_nodes} needs one process per machine, started by torchrun or srun (see the "
            "README's multi-node section); started alone, this process would wait for the others forever."
        )
