"""The command line of ``scripts/train.py`` turned into built objects. Every argument of the Trainer and of the
LightningModule is a top-level flag and config-file key (LightningCLI would nest them: ``--trainer.accelerator``);
--data takes a class path, its arguments as ``--data.NAME``, as does a model's argument that takes a class (the
example's --net). Each run records its resolved configuration in ``<run>/config.yaml``."""

import inspect
import os
import sys
from collections import namedtuple
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Literal

import torch
import yaml
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace, set_loader
from lightning.pytorch import LightningDataModule, Trainer, seed_everything
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar, Timer
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.model_helpers import is_overridden
from pydantic import PositiveInt

from . import checkpoints, checks, classes, devices, resume, workarounds
from .callbacks import EpochHistory, StopTogether, progress_display
from .classes import model_class
from .errors import UserError
from .records import RUN_RECORD, replaced
from .runs import Run

# Trainer settings this template changes from Lightning's defaults (the rest are Lightning's own).
TRAINER_DEFAULTS = {"max_epochs": 12, "devices": 1, "log_every_n_steps": 10}
BatchSize = PositiveInt  # --batch_size of every script (a plain int: it goes into checkpoints)


@dataclass
class Options:
    """train.py's own options (the Trainer's, the model's and --data's follow)

    Args:
        seed: Seed of model initialization and data order.
        output_dir: The run folder (default: a new folder under runs/).
        ckpt_path: "last" resumes the run in --output_dir from its own config.yaml. A .ckpt path starts a new run
            from its weights (fine-tuning: this run's own optimizer, schedule and epochs).
        float32_matmul_precision: float32 matrix products: highest (full float32), high (TensorFloat32 on GPUs with
            Tensor Cores) or medium (bfloat16); torch.set_float32_matmul_precision.
        batch_size: Samples per batch, for every stage; every data module takes it.
        logger: csv (metrics.csv in the run folder), tensorboard (TensorBoard's files there, with the tensorboard
            extra), false, or any Lightning Logger by class path, e.g. --logger WandbLogger --logger.project mnist.
        limit_train_batches: Training batches per epoch (default: all). As for every limit_*_batches: a whole number
            (int) is that many batches, a number with a point (float) a fraction of them, as in Lightning; per device.
        limit_val_batches: Validation batches per check (default: all).
        limit_test_batches: Test batches (default: all).
        overfit_batches: Training batches to overfit, the same for validation (default: none).
        accumulate_grad_batches: Batches whose gradients make one optimizer step.
        check_val_every_n_epoch: Validate every N training epochs (none: only at --val_check_interval).
    """

    seed: int = 42
    output_dir: str | None = None
    ckpt_path: str | None = None
    float32_matmul_precision: Literal["highest", "high", "medium"] = "high"
    batch_size: BatchSize = 4096
    logger: Literal["csv", "tensorboard"] | bool | Logger | list[Logger] | None = "csv"
    # Declared here with int | float: typing caches unions, and hands back an equal Union[float, int] made earlier
    # (one in Lightning itself) for the Trainer's Union[int, float]; jsonargparse tries the types in order and would
    # read 2 as 2.0, a fraction.
    limit_train_batches: int | float | None = None
    limit_val_batches: int | float | None = None
    limit_test_batches: int | float | None = None
    overfit_batches: int | float = 0.0
    # Bounds Lightning leaves unchecked (0 divides by zero in its loops, a negative count trains backwards).
    accumulate_grad_batches: PositiveInt = 1
    check_val_every_n_epoch: PositiveInt | None = 1


class Parser(ArgumentParser):
    """Every script's parser (and jsonargparse's for ``--data.help CLASS``): flags are never abbreviated."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --max_epoch is a mistake to name, not --max_epochs silently
        super().__init__(*args, **kwargs)


@cache  # one parser per process (and default data module): parsing, building and saving the record share it
def build_parser(data_module: str | None = None) -> ArgumentParser:
    set_loader("yaml", checks.load_yaml, exceptions=(yaml.YAMLError,))  # config files: duplicate keys refused
    parser = Parser(description="Train a network, then test its best checkpoint.", exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile, help="A YAML file of options; later flags override it.")
    parser.add_class_arguments(Options, None, instantiate=False)
    # Its arguments without a default are the data module's to give, not options (build).
    parser.add_class_arguments(model_class(), None, instantiate=False, skip=set(data_given(model_class())))
    parser.add_subclass_arguments(
        LightningDataModule,
        "data",
        as_group=False,
        help="Any LightningDataModule by class path, its arguments as --data.NAME (listed by --data.help CLASS_PATH).",
    )
    parser.link_arguments("batch_size", "data.init_args.batch_size")  # every data module takes it
    # The run folder is --output_dir, so Trainer's own default_root_dir would only be a second name for it.
    parser.add_class_arguments(Trainer, None, instantiate=False, skip={"default_root_dir", *vars(Options())})
    parser.set_defaults(TRAINER_DEFAULTS, data={"class_path": data_module or classes.DATA_MODULE})
    return parser


def parse_args(argv: list[str] | None = None) -> Namespace:
    """The resolved configuration, checked where no library checks it. ``--output_dir <run> --ckpt_path last`` starts
    from the run's own record."""
    argv = sys.argv[1:] if argv is None else argv
    # Read before parsing, argument by argument: a --data.batch_size jsonargparse would drop for the linked
    # --batch_size, and the run folder and --ckpt_path, which decide whether this is a resume.
    if any(arg.partition("=")[0] == "--data.batch_size" for arg in argv):
        raise UserError(checks.batch_size_refused("--data.batch_size"))
    given = dict([*pairwise(argv), *(arg.split("=", 1) for arg in argv if "=" in arg)])  # --flag VALUE, --flag=VALUE
    run_dir = given.get("--output_dir")
    # A SLURM job that was requeued (scontrol requeue, Lightning's answer to SIGUSR1) runs its own command again.
    requeued = os.environ.get("SLURM_RESTART_COUNT", "0") != "0"
    if requeued and run_dir and (Path(run_dir) / RUN_RECORD).is_file():  # it goes on with its run
        argv, given["--ckpt_path"] = [*argv, "--ckpt_path", "last"], "last"
    if resuming := given.get("--ckpt_path") == "last":  # the run's own record, and what the command line changes
        if not run_dir:
            raise UserError("A resume names the run's folder: --output_dir RUN --ckpt_path last.")
        argv = ["--config", str(record := resume.resumed_record(Path(run_dir))), *argv]
    config = build_parser().parse_args(argv)
    # jsonargparse gives a data module by class path the default one's values of its arguments of the same names (by
    # design, its issue 460: a data_dir of the example's): read again with that data module as the default.
    if (chosen := config.data.class_path) != classes.DATA_MODULE:
        config = build_parser(chosen).parse_args(argv)
    if resuming:
        resume.refuse_changes(yaml.safe_load(build_parser().dump(config, skip_none=False)), record)
    elif config.ckpt_path == "last":
        raise UserError("A resume is `train.py --output_dir RUN --ckpt_path last`, typed: not from a config file.")
    devices.check_gpu(config.accelerator)
    checks.check_launched(config.num_nodes)
    return config


def data_given(model_type: type) -> list[str]:
    """The model's arguments without a default: its data module gives them, as attributes of the same names (as
    LightningCLI's link_arguments would, from data to model)."""
    parameters = inspect.signature(model_type).parameters.values()
    return [p.name for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


Training = namedtuple("Training", "trainer model datamodule ckpt_path best")  # what train.train takes


def build(config: Namespace, run: Run) -> Training:
    """The data, the model, the callbacks, the logger and the Trainer, in that order, and the run's record written:
    each mistake found before Lightning's banners print."""
    seed_everything(config.seed, workers=True, verbose=False)  # before the model: it seeds the initial weights
    torch.set_float32_matmul_precision(config.float32_matmul_precision)
    built = build_parser().instantiate_classes(config)
    datamodule, model_type = built.data, model_class()
    needed = data_given(model_type)
    missing = [name for name in needed if not hasattr(datamodule, name)]
    missing += ["batch_size argument"] * ("batch_size" not in inspect.signature(type(datamodule)).parameters)
    if missing:
        raise UserError(
            f"The data module {type(datamodule).__name__} has no {' or '.join(missing)}: every data module takes the "
            f"top-level --batch_size, and {model_type.__name__} takes {', '.join(needed)} from it (its arguments "
            "without a default)."
        )
    model = model_type(**arguments_of(model_type, built), **{name: getattr(datamodule, name) for name in needed})
    checks.check_testable(datamodule, tested=config.limit_test_batches != 0)
    if start := run.resume_from or run.weights:  # a new run from weights has its own optimizer and schedule
        trained = checkpoints.load_weights(model, start)  # resuming: refused now if they no longer fit; Lightning loads
    # Where a run lives is not part of what it is, nor is how long one invocation may train: a --max_time kept here
    # would stop every later resume at once (Lightning's Timer counts the earlier segments' time).
    record = config.clone().update(Namespace(output_dir=None, max_time=None, ckpt_path=run.weights))
    record_text = build_parser().dump(record, skip_none=False)
    build_parser().parse_string(record_text)  # as a resume will read it: what it would refuse is refused now
    # Class paths and arguments as hyperparameters, as LightningCLI keeps them (a function that builds the network by
    # its import path): load_from_checkpoint rebuilds any model and data module, with no pickled code.
    instantiator = {"_instantiator": "lightning.pytorch.cli.instantiate_module"}
    chosen = arguments_of(model_type, yaml.safe_load(record_text))
    model.save_hyperparameters({**model.hparams, **chosen, "_class_path": classes.MODEL, **instantiator})
    data = config.as_dict()["data"]  # with the linked batch_size, which the record keeps as --batch_size only
    datamodule.save_hyperparameters({**data["init_args"], "_class_path": data["class_path"], **instantiator})

    given = built.callbacks or []  # one callback or a list, as Lightning takes them
    callbacks = [*(given if isinstance(given, list) else [given]), EpochHistory(resume.fingerprint(record_text))]
    # Checked at epoch ends: Lightning's check after every batch ends the epoch where it is, as if complete (a
    # resumed run would skip the rest of it).
    if built.max_time:
        callbacks.append(Timer(built.max_time, interval="epoch"))
    # What the best checkpoint is, the model says (monitor, mode); without validation (--limit_val_batches 0, no
    # val_dataloader) there is none, and the run tests its last weights.
    validated = built.limit_val_batches != 0 and is_overridden("val_dataloader", datamodule)
    best = None
    if built.enable_checkpointing is not False:
        best, last = checkpoints.run_checkpoints(run.dir / "checkpoints", validated and model)
        callbacks += [best, last] if best else [last]
    if built.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_display())
    if built.logger in ("csv", "tensorboard", None, True):  # in the run folder: each segment in a logs/version_N
        built.logger = (TensorBoardLogger if built.logger == "tensorboard" else CSVLogger)(run.dir, "logs")
    callbacks += [LearningRateMonitor(logging_interval="step")] * bool(built.logger)
    built.profiler = built.profiler or workarounds.NoProfiler()  # Lightning's default, cheaper at every step
    built.update(Namespace(callbacks=callbacks, max_time=None, default_root_dir=run.dir))
    with workarounds.lightning_notes_ignored():
        trainer = Trainer(**arguments_of(Trainer, built))
    if run.resume_from:
        resume.check_processes(trained, trainer.world_size)
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # Lightning's default, not a --plugins one
        trainer.strategy.checkpoint_io = checkpoints.AtomicCheckpointIO()
    if trainer.world_size > 1:  # only where processes must agree: Lightning calls every callback at every step
        trainer.callbacks.append(StopTogether())
    if trainer.is_global_zero:
        with replaced(run.dir / RUN_RECORD) as file:  # whole or not at all
            file.write(record_text.encode())
    return Training(trainer, model, datamodule, run.resume_from, best)


def arguments_of(cls: type, config: Namespace | dict) -> dict:
    return {name: config[name] for name in inspect.signature(cls).parameters if name in config}
