"""The command line of ``scripts/train.py`` turned into built objects. Every argument of the Trainer and the model
is a top-level flag and config-file key (LightningCLI would nest them: ``--trainer.accelerator``); --net and --data take
a class path, their arguments as ``--net.NAME``. Each run records its resolved configuration in ``<run>/config.yaml``.
"""

import importlib.util
import inspect
import itertools
import logging
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import yaml
from annotated_types import Ge
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_helpers import is_overridden

from .callbacks import BatchCheck, EpochHistory, EpochTimer, StopTogether, progress_display
from .checkpoints import (
    AtomicCheckpointIO,
    completed_epochs,
    load_weights,
    read_checkpoint,
    run_checkpoints,
)
from .checks import check_launched, check_network, check_schedule, check_testable, data_sizes, read_config_file
from .classes import DATA_MODULE, MODEL, model_class
from .devices import check_gpu
from .errors import UserError
from .records import (
    RUN_RECORD,
    CSVLog,
    FolderInUse,
    OutputDirError,
    clear_unstarted_run,
    discard_new_run,
    lock,
    new_run_dir,
    replaced,
)
from .resume import fingerprint, refuse_finished_run, resumed_record
from .workarounds import lightning_notes_ignored

# Lightning's error for a setting that cannot work, raised by Lightning or by a data module: printed as a paragraph.
USER_ERRORS = (MisconfigurationException,)
# Trainer settings this template changes from Lightning's defaults (the rest are Lightning's own).
TRAINER_DEFAULTS = {"max_epochs": 12, "devices": 1, "log_every_n_steps": 10}
RUN_DIR_VARIABLE = "MNIST_LIGHTNING_RUN_DIR"  # rank 0's choice of run folder, for the ranks Lightning starts
# The Trainer's options that take a number of batches (int) or a fraction (float), declared here with int | float:
# typing caches unions, and hands back an equal Union[float, int] made earlier (one in Lightning itself) for
# Lightning's Union[int, float]; jsonargparse tries the types in order and would read 2 as 2.0, a fraction.
COUNT_OR_FRACTION = {
    "limit_train_batches": (None, "Training batches per epoch (default: all)"),
    "limit_val_batches": (None, "Validation batches per check (default: all)"),
    "limit_test_batches": (None, "Test batches (default: all)"),
    "limit_predict_batches": (None, "Prediction batches (default: all)"),
    "overfit_batches": (0.0, "Training batches to overfit, the same for validation (default: none)"),
}
BatchSize = Annotated[int, Ge(1)]  # --batch_size of every script


class Parser(ArgumentParser):
    """Every script's parser (and jsonargparse's for ``--data.help CLASS``): flags are never abbreviated."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --max_epoch is a mistake to name, not --max_epochs silently
        super().__init__(*args, **kwargs)


@cache  # one parser per process: parsing, building the classes and saving the record share it
def build_parser() -> ArgumentParser:
    parser = Parser(
        prog="train.py",
        description="Train a network with PyTorch Lightning, then test the best checkpoint.",
        exit_on_error=False,
    )
    parser.add_argument(
        "--config",
        action=ActionConfigFile,
        help="A YAML file of options; later flags override it, --output_dir and --ckpt_path wherever they are.",
    )
    parser.add_argument("--seed", type=int, default=42, help="Seed of model initialization and data order.")
    parser.add_argument(
        "--output_dir", type=str | None, default=None, help="The run folder (default: a new folder under runs/)."
    )
    parser.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help='"last" resumes the run in --output_dir from its own config.yaml. A .ckpt path starts a new run from '
        "its weights (fine-tuning: this run's own optimizer, schedule and epochs).",
    )
    parser.add_argument("--quiet", type=bool, default=False, help="No progress bar, model summary or banners.")
    parser.add_argument(
        "--float32_matmul_precision",
        type=Literal["highest", "high", "medium"],
        default="high",
        help="float32 matrix products: highest (full float32), high (TensorFloat32 on GPUs with Tensor Cores) or "
        "medium (bfloat16); torch.set_float32_matmul_precision.",
    )
    # The data's sizes are the data module's to give, not options (build_model_and_data).
    parser.add_class_arguments(model_class(), nested_key=None, instantiate=False, skip={"input_shape", "num_classes"})
    parser.add_subclass_arguments(LightningDataModule, "data", help="The data module, by class path.")
    parser.groups["data"].title = (  # else the first lines of LightningDataModule's docstring, cut mid-sentence
        "The data: any LightningDataModule by class path, its arguments as --data.NAME VALUE (listed by "
        "--data.help CLASS_PATH)"
    )
    parser.add_argument("--batch_size", type=BatchSize, default=4096, help="Samples per batch, for every stage.")
    parser.link_arguments("batch_size", "data.init_args.batch_size")  # every data module takes it
    # The run folder is --output_dir, so Trainer's own default_root_dir would only be a second name for it.
    skip = {"default_root_dir", "logger", *COUNT_OR_FRACTION}
    parser.add_class_arguments(Trainer, nested_key=None, instantiate=False, skip=skip)
    for name, (default, what) in COUNT_OR_FRACTION.items():
        parser.add_argument(
            f"--{name}",
            type=int | float | None,
            default=default,
            help=f"{what}: a whole number (int) is that many "
            "batches, a number with a point (float) a fraction of them, as in Lightning. Per device.",
        )
    parser.add_argument(
        "--logger",
        type=Literal["csv", "tensorboard"] | bool | Logger | list[Logger] | None,
        default="csv",
        help="csv (metrics.csv in the run folder), tensorboard (needs the tensorboard extra), false, or any "
        "Lightning Logger by class path, e.g. --logger WandbLogger --logger.project mnist.",
    )
    parser.set_defaults(TRAINER_DEFAULTS)
    parser.set_defaults(net={"class_path": "mnist_lightning.model.SimpleNN"}, data={"class_path": DATA_MODULE})
    return parser


def parse_args(argv: list[str] | None = None) -> Namespace:
    """The resolved configuration. ``--output_dir <run> --ckpt_path last`` starts from the run's own record."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # --print_config is answered here, after the values are checked: jsonargparse would print unchecked ones.
    print_config = [arg for arg in argv if arg.split("=")[0] == "--print_config"]
    argv = [arg for arg in argv if arg not in print_config]
    parser = build_parser()
    if flag_value(argv, "--ckpt_path") == "last":  # the run's record, and the flags a resume may change
        record = resumed_record(argv)
        read_config_file(str(record))  # duplicate keys: a record edited by hand before its first checkpoint
        config = parser.parse_args(["--config", str(record), *argv])
    else:
        refuse_data_batch_size(argv, {path: read_config_file(path) for path in flag_values(argv, "--config")})
        config = parser.parse_args(argv)
        if config.ckpt_path == "last":
            raise UserError("A resume is `train.py --output_dir RUN --ckpt_path last`, typed: not from a config file.")
    check_schedule(config)
    if print_config:
        build_model_and_data(config)  # the model's and the data module's own checks
        skip_none = any("skip_null" in arg for arg in print_config)
        print(parser.dump(config, skip_none=skip_none, skip_validation=True), end="")
        raise SystemExit(0)
    return config


def flag_values(argv: list[str], flag: str) -> list[str]:
    """The values of ``--flag value`` and ``--flag=value`` in ``argv``, in order, unparsed."""
    pairs = itertools.pairwise([*argv, ""])
    return [value if arg == flag else arg.split("=", 1)[1] for arg, value in pairs if arg.split("=")[0] == flag]


def flag_value(argv: list[str], flag: str) -> str | None:
    return (flag_values(argv, flag) or [None])[-1]


def refuse_data_batch_size(argv: list[str], files: dict[str, dict]) -> None:
    """The data module's batch_size is the top-level --batch_size (linked into it), which would silently win."""
    given = [arg for arg in argv if arg.split("=")[0] == "--data.batch_size"]
    for path, content in files.items():
        data = content.get("data") if isinstance(content, dict) else None
        if isinstance(data, dict) and "batch_size" in (data.get("init_args") or {}):
            given.append(f"batch_size under data: init_args: in {path}")
    if given:
        raise UserError(
            f"{given[0].split('=')[0]}: the batch size is the top-level --batch_size (a top-level batch_size: in a "
            "config file), which every data module takes; give it there."
        )


@dataclass
class Training:
    """What :func:`mnist_lightning.core.train.train` takes."""

    trainer: Trainer
    model: LightningModule
    datamodule: LightningDataModule
    ckpt_path: str | None
    run_dir: Path
    resuming: bool


def build_training(config: Namespace) -> Training:
    """Everything built and the run recorded, each mistake found before Lightning's banners print; a new run that
    fails here leaves no folder behind."""
    check_gpu(config.accelerator)
    check_launched(config.num_nodes)
    weights = start_weights(config)
    if weights:
        read_checkpoint(weights)  # refuses a missing, damaged or foreign file before anything starts
    run_dir, resuming = choose_run_dir(config)
    try:
        if config.quiet:  # Lightning's banners ("Seed set to", "GPU available: ...") are INFO records
            for name in ("lightning.pytorch", "lightning.fabric"):
                logging.getLogger(name).setLevel(logging.WARNING)
        # Before --net is built: it seeds the initial weights. The seed is in config.yaml and metrics.json.
        seed_everything(config.seed, workers=True, verbose=False)
        torch.set_float32_matmul_precision(config.float32_matmul_precision)
        built, model, datamodule = build_model_and_data(config)
        check_testable(datamodule, tested=config.limit_test_batches != 0)
        if weights and not resuming:
            load_weights(model, weights)  # a new run from these weights, with its own optimizer and schedule
        elif resuming:
            load_weights(model, run_dir / "checkpoints" / "last.ckpt")  # Lightning loads them again
        if rank_zero_only.rank == 0:
            datamodule.prepare_data()  # the data files, checked now (Lightning calls it again; it checks once)
        # Where a run lives is not part of what it is, nor is how long one invocation may train: a --max_time kept
        # here would stop every later resume at once (Lightning's Timer counts the whole run's time).
        record = config.clone()
        record.output_dir, record.max_time, record.ckpt_path = None, None, weights
        record_text = build_parser().dump(record, skip_none=False)
        trainer = build_trainer(built, run_dir, resuming, fingerprint(record_text))
        record_classes(model, datamodule, config)
        if trainer.is_global_zero:
            with replaced(run_dir / RUN_RECORD) as file:  # whole or not at all: a WriteError names a full disk
                file.write(record_text.encode())
    except BaseException:
        if not resuming and rank_zero_only.rank == 0:
            discard_new_run(run_dir)
        raise
    return Training(
        trainer, model, datamodule, str(run_dir / "checkpoints" / "last.ckpt") if resuming else None, run_dir, resuming
    )


INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"  # how load_from_checkpoint rebuilds a class path


def build_model_and_data(config: Namespace) -> tuple[Namespace, LightningModule, LightningDataModule]:
    """``config`` with its classes built, and the model built for the data module's sizes."""
    built = build_parser().instantiate_classes(config)
    sizes = data_sizes(built.data)
    model = model_class()(**arguments_of(model_class(), built), **sizes)
    check_network(model.net, model.example_input_array, sizes["num_classes"])  # now, not at the first batch
    return built, model, built.data


def network_path(net: Any) -> str:
    """--net's class path, or the import path of a function that builds the network."""
    if isinstance(net, Namespace):
        return net.class_path
    return f"{net.__module__}.{net.__qualname__}" if hasattr(net, "__qualname__") else str(net)


def start_weights(config: Namespace) -> str | None:
    """``--ckpt_path <file>``, or for a resumed run the one in its record (if it started from one)."""
    if config.ckpt_path != "last":
        return config.ckpt_path
    record = Path(config.output_dir or "") / RUN_RECORD
    return (yaml.safe_load(record.read_text()) or {}).get("ckpt_path") if record.is_file() else None


def arguments_of(cls: type, config: Namespace) -> dict[str, Any]:
    return {name: config[name] for name in inspect.signature(cls.__init__).parameters if name in config}


def record_classes(model: LightningModule, datamodule: LightningDataModule, config: Namespace) -> None:
    """Class paths and settings as hyperparameters, as LightningCLI keeps them: ``load_from_checkpoint`` rebuilds any
    --net and --data with Lightning's ``instantiate_module``, with no pickled code in the checkpoint."""
    settings = config.as_dict()
    chosen = arguments_of(model_class(), Namespace(settings))
    if not isinstance(chosen.get("net"), dict):  # a function that builds the network: kept as its import path
        chosen["net"] = network_path(config.net)
    data = {**(settings["data"].get("init_args") or {}), "_class_path": settings["data"]["class_path"]}
    model.save_hyperparameters({**model.hparams, **chosen, "_class_path": MODEL, "_instantiator": INSTANTIATOR})
    datamodule.save_hyperparameters({**data, "_instantiator": INSTANTIATOR})


def choose_run_dir(config: Namespace) -> tuple[Path, bool]:
    """This run's folder and whether it resumes a run there: rank 0 decides, the DDP ranks inherit it."""
    resuming, run_dir = config.ckpt_path == "last", Path(config.output_dir or "")
    if rank_zero_only.rank > 0:  # a DDP rank: rank 0 has already chosen (and passed it on) or was told
        shared = config.output_dir or os.environ.get(RUN_DIR_VARIABLE)
        if not shared:
            raise UserError("Processes started by torchrun or srun must all be given the same --output_dir.")
        # Given rank 0's command: a --ckpt_path last that rank 0 turned into a new start (no checkpoint) is one here.
        return Path(shared), resuming and (Path(shared) / "checkpoints" / "last.ckpt").is_file()
    last = run_dir / "checkpoints" / "last.ckpt"
    if resuming and run_dir.is_dir():
        lock(run_dir)  # one run at a time in a folder
    if resuming and not last.is_file() and clear_unstarted_run(run_dir):
        # Killed (kill -9, power loss) before its first checkpoint: nothing to resume, so it starts over.
        print(
            f"{run_dir} holds no checkpoint (its run stopped before the first epoch ended): starting the run from "
            f"the beginning, with the options in its {RUN_RECORD}.",
            file=sys.stderr,
        )
        resuming = False
    elif resuming and not last.is_file() and (kept := sorted(last.parent.glob("*.ckpt"))):
        raise UserError(
            f"--ckpt_path last resumes the run in --output_dir from {last}, its resume point, which is gone ("
            f"{last.parent} holds {', '.join(path.name for path in kept)}). The run cannot go on without it; its kept "
            f"weights can be tested (scripts/evaluate.py --ckpt_path {kept[0]}) or trained further as a new run "
            f"(scripts/train.py --ckpt_path {kept[0]})."
        )
    elif resuming:
        refuse_finished_run(run_dir, completed_epochs(read_checkpoint(last)), config.max_epochs)
    else:
        try:
            run_dir = new_run_dir(config.output_dir)
        except OutputDirError as error:
            if os.path.isfile(last) and not isinstance(error, FolderInUse):  # False for a name too long, as refused
                raise OutputDirError(f"{error} To continue the run there, add --ckpt_path last.") from error
            raise
    os.environ[RUN_DIR_VARIABLE] = str(run_dir.resolve())  # inherited by the ranks Lightning launches
    return run_dir, resuming


def as_list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, list | tuple) else [value]


def build_logger(config: Namespace, run_dir: Path, resuming: bool) -> Logger | list[Logger] | bool:
    if config.logger in ("csv", None, True):
        # <run_dir>/logs/metrics.csv; a resumed run logs to logs/resume-N/ rather than overwrite it.
        version = f"resume-{len(list(run_dir.glob('logs/resume-*'))) + 1}" if resuming else ""
        return CSVLog(run_dir, name="logs", version=version)
    if config.logger == "tensorboard":
        if not (importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX")):
            raise UserError('--logger tensorboard needs TensorBoard: pip install -e ".[tensorboard]".')
        return TensorBoardLogger(run_dir, name="tensorboard", version="", default_hp_metric=False)
    return config.logger  # False, or Logger objects built from class paths


def build_trainer(config: Namespace, run_dir: Path, resuming: bool, record: str | None) -> Trainer:
    logger = build_logger(config, run_dir, resuming)
    callbacks = [*as_list(config.callbacks), BatchCheck(), EpochHistory(record)]
    if config.max_time is not None:
        callbacks.append(EpochTimer(config.max_time))
    if logger:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    if config.enable_checkpointing is not False:
        # Without validation (--limit_val_batches 0, no val_dataloader) there is no best: it tests its last weights.
        validated = config.limit_val_batches != 0 and is_overridden("val_dataloader", config.data, LightningDataModule)
        callbacks += run_checkpoints(run_dir / "checkpoints", validated)
    plugins = as_list(config.plugins)
    if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
        plugins.append(AtomicCheckpointIO())
    settings = arguments_of(Trainer, config) | {"callbacks": callbacks, "logger": logger, "plugins": plugins}
    settings["max_time"] = None  # EpochTimer above
    if config.quiet:
        settings |= {"enable_progress_bar": False, "enable_model_summary": False}
    if settings["enable_progress_bar"] is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(progress_display())
    with lightning_notes_ignored():
        trainer = Trainer(default_root_dir=run_dir, **settings)
    if trainer.world_size > 1:  # only where there are processes to agree: Lightning calls every callback every step
        trainer.callbacks.append(StopTogether())
    return trainer
