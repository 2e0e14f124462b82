"""Train SimpleNN on MNIST with Lightning: fit, test the best checkpoint, write ``metrics.json``.

Every option of the Trainer, of MNISTClassifier and of MNISTDataModule is a top-level flag
(``--accelerator gpu --devices 1 --batch_size 256``) and a top-level key of a YAML config file.
jsonargparse, the parser behind LightningCLI, reads them straight from the classes' signatures.
"""

import gc
import importlib.util
import inspect
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .callbacks import EpochHistory, LastCheckpoint, TimedProgressBar
from .checkpoint_io import AtomicCheckpointIO
from .datamodule import MNISTDataModule
from .devices import cache_cuda_check_off_gpu, check_accelerator
from .errors import UserError, run_main
from .lightning_module import MNISTClassifier
from .outputs import new_run_dir, peak_memory_mb, write_json
from .plots import save_plots
from .profiler import NoOpProfiler

# Trainer settings this template changes from Lightning's defaults (the rest are Lightning's own).
TRAINER_DEFAULTS = {"max_epochs": 12, "devices": 1, "log_every_n_steps": 10}
RUN_DIR_VARIABLE = "MNIST_LIGHTNING_RUN_DIR"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="train.py",
        description="Train SimpleNN on MNIST with PyTorch Lightning, then test the best checkpoint.",
    )
    parser.add_argument(
        "--config", action=ActionConfigFile, help="YAML file of options (see configs/); flags after it override it."
    )
    parser.add_argument("--seed", type=int, default=42, help="Seed of model initialization and data order.")
    parser.add_argument(
        "--output_dir",
        type=str | None,
        default=None,
        help="Folder for checkpoints, logs and metrics.json (default: a new folder under runs/).",
    )
    parser.add_argument("--ckpt_path", type=str | None, default=None, help="Checkpoint to resume training from.")
    parser.add_argument(
        "--quiet", type=bool, default=False, help="No progress bar, model summary or Lightning banner: logs only."
    )
    parser.add_class_arguments(MNISTClassifier, nested_key=None, instantiate=False)
    parser.add_class_arguments(MNISTDataModule, nested_key=None, instantiate=False)
    # The run folder is --output_dir, so Trainer's own default_root_dir would only be a second name for it.
    parser.add_class_arguments(Trainer, nested_key=None, instantiate=False, skip={"default_root_dir", "logger"})
    parser.add_argument(
        "--logger",
        type=Literal["csv", "tensorboard"] | bool | Logger | list[Logger] | None,
        default="csv",
        help="csv (metrics.csv in the run folder), tensorboard (needs the tensorboard extra), false, or any "
        "Lightning Logger by class path, e.g. --logger WandbLogger --logger.project mnist.",
    )
    parser.set_defaults(TRAINER_DEFAULTS)
    return parser


def parse_config(argv: list[str] | None = None) -> Namespace:
    """Parse flags and config files; callbacks, loggers and plugins given by class path come back built."""
    parser = build_parser()
    return parser.instantiate(parser.parse_args(argv))


def kwargs_for(cls: type, config: Namespace) -> dict[str, Any]:
    """The entries of ``config`` that ``cls`` takes as constructor arguments."""
    names = inspect.signature(cls.__init__).parameters
    return {name: config[name] for name in names if name in config}


def as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def make_logger(config: Namespace, output_dir: Path) -> Logger | list[Logger] | bool:
    if config.logger in ("csv", None, True):
        # <output_dir>/metrics.csv; a resumed run logs to resume-N/ beside it rather than overwrite it.
        version = f"resume-{len(list(output_dir.glob('resume-*'))) + 1}" if config.ckpt_path else ""
        return CSVLogger(output_dir, name="", version=version)
    if config.logger == "tensorboard":
        if not (importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX")):
            raise UserError('--logger tensorboard needs TensorBoard: pip install -e ".[tensorboard]".')
        return TensorBoardLogger(output_dir, name="tensorboard", version="")
    return config.logger  # False, or Logger objects built from class paths


def build_trainer(config: Namespace, output_dir: Path) -> tuple[Trainer, ModelCheckpoint | None, EpochHistory]:
    history = EpochHistory()
    callbacks = [*as_list(config.callbacks), history]
    checkpoint = None
    if config.enable_checkpointing is not False:
        checkpoint = ModelCheckpoint(
            dirpath=output_dir / "checkpoints",
            filename="best-epoch{epoch:02d}-acc{val/acc:.4f}",
            auto_insert_metric_name=False,
            monitor="val/acc",
            mode="max",
        )
        callbacks += [checkpoint, LastCheckpoint(output_dir)]
    if config.quiet:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    elif config.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(TimedProgressBar())
    plugins = as_list(config.plugins)
    if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
        plugins.append(AtomicCheckpointIO())
    trainer_kwargs = kwargs_for(Trainer, config) | {
        "callbacks": callbacks,
        "logger": make_logger(config, output_dir),
        "plugins": plugins,
        "profiler": config.profiler or NoOpProfiler(),
    }
    if config.quiet:
        trainer_kwargs |= {"enable_progress_bar": False, "enable_model_summary": False}
    try:
        trainer = Trainer(default_root_dir=output_dir, **trainer_kwargs)
    except (MisconfigurationException, TypeError, ValueError) as error:
        # Lightning's own messages name the setting and list the valid values.
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise UserError(
            f"The Trainer settings are not valid: {error} (--devices takes a count like 1, a list like [0, 1], "
            f"-1 for all, or auto; this machine has {gpus} usable GPU(s) and {os.cpu_count()} CPU cores; run "
            "`python scripts/train.py --help` for every option)."
        ) from error
    cache_cuda_check_off_gpu(trainer.strategy.root_device)
    return trainer, checkpoint, history


def run_dir(config: Namespace) -> Path:
    """This run's folder, decided once by rank 0 and shared with the processes Lightning starts for DDP."""
    if rank_zero_only.rank > 0:  # a DDP rank: rank 0 has already chosen (and passed it on) or was told
        shared = config.output_dir or os.environ.get(RUN_DIR_VARIABLE)
        if not shared:
            raise UserError("Processes started by torchrun or srun must all be given the same --output_dir.")
        return Path(shared)
    if config.ckpt_path == "last":  # resume the run in --output_dir where it stopped
        last = Path(config.output_dir or "") / "checkpoints" / "last.ckpt"
        if not config.output_dir or not last.is_file():
            found = f"{last} does not exist" if config.output_dir else "no --output_dir was given"
            raise UserError(
                f"--ckpt_path last resumes the run in --output_dir, but {found}. Pass the folder of the run to "
                "resume, e.g. --output_dir runs/2026-01-31_12-00-00 --ckpt_path last."
            )
        output_dir = Path(config.output_dir)
    else:
        output_dir = new_run_dir(config.output_dir)
    os.environ[RUN_DIR_VARIABLE] = str(output_dir.resolve())  # inherited by the ranks Lightning launches
    return output_dir


def train(config: Namespace) -> dict[str, Any]:
    """Fit, test the best checkpoint and return (and write) the run's metrics."""
    check_accelerator(config.accelerator, config.devices)
    output_dir = run_dir(config)
    if config.quiet:  # Lightning's banners ("Seed set to", "GPU available: ...") are INFO records
        for name in ("lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.WARNING)
    seed_everything(config.seed, workers=True)
    try:
        datamodule = MNISTDataModule(**kwargs_for(MNISTDataModule, config))
        model = MNISTClassifier(**kwargs_for(MNISTClassifier, config))
    except ValueError as error:
        raise UserError(f"{error}.") from error
    trainer, checkpoint, history = build_trainer(config, output_dir)

    start = time.perf_counter()
    existed = output_dir.exists()
    try:
        # weights_only: a checkpoint holds tensors and plain values only; nothing in it is run as code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=config.ckpt_path, weights_only=True)
    except SIGTERMException:
        sys.exit(128 + signal.SIGTERM)  # the shell's convention for "ended by SIGTERM"; progress was saved
    except Exception:
        # A run that failed before its first checkpoint leaves nothing behind (no empty or half-written folder).
        if not existed and trainer.is_global_zero and not list(output_dir.glob("checkpoints/*.ckpt")):
            shutil.rmtree(output_dir, ignore_errors=True)
        raise
    fit_seconds = time.perf_counter() - start
    epochs = list(history.rows)  # before testing: loading the best checkpoint restores callback state too
    # Test the weights that did best on validation, not merely the last ones.
    best_path = checkpoint.best_model_path if checkpoint else ""
    (results,) = trainer.test(
        model, datamodule=datamodule, ckpt_path=best_path or None, verbose=False, weights_only=True
    )

    metrics = {
        "test/acc": results["test/acc"],
        "test/loss": results["test/loss"],
        "best_val/acc": float(checkpoint.best_model_score) if checkpoint and checkpoint.best_model_score else None,
        "epochs": trainer.current_epoch,
        "fit_seconds": fit_seconds,
        "accelerator": trainer.strategy.root_device.type,
        "devices": trainer.num_devices,
        "num_nodes": trainer.num_nodes,
        "precision": trainer.precision,
        "batch_size": datamodule.hparams.batch_size,
        "seed": config.seed,
        "best_checkpoint": best_path or None,
        **peak_memory_mb(trainer.strategy.root_device),
        "history": epochs,
    }
    if trainer.is_global_zero:
        write_json(output_dir / "metrics.json", metrics)
        plots = []
        if importlib.util.find_spec("matplotlib"):
            plots = save_plots(epochs, model.test_confusion_matrix, output_dir)
        print_summary(metrics, output_dir, plots)
    return metrics


def print_summary(metrics: dict[str, Any], output_dir: Path, plots: list[Path]) -> None:
    print(
        f"\nTest accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f}) after "
        f"{metrics['epochs']} epochs, fit in {metrics['fit_seconds']:.1f} s on "
        f"{metrics['devices']} x {metrics['accelerator']} ({metrics['precision']} precision).\n"
        f"Run folder: {output_dir}  (metrics.json, checkpoints/, logs)"
    )
    for path in plots:
        print(f"Plot: {path}")
    if not plots:
        print('Plots: pip install -e ".[plots]" for learning curves and a confusion matrix.')


def main(argv: list[str] | None = None) -> int:
    # The 400,000 objects that importing torch and Lightning made live as long as the process. Frozen, they
    # are left out of Python's full garbage collections: the one at exit took 1.5 s of a 7 s run here, and
    # each one during training 0.2 s.
    gc.freeze()
    return run_main(lambda: train(parse_config(argv)))


if __name__ == "__main__":
    sys.exit(main())
