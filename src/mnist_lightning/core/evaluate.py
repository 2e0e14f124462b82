"""Test a trained checkpoint on its data module's test set, on any accelerator; writes metrics.json, with the
keys of training's, and config.yaml, its options, in a new run folder."""

import logging
from dataclasses import dataclass, field
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.utilities import rank_zero_only

from .callbacks import BatchCheck, progress_display
from .checkpoints import load_checkpoint
from .checks import check_tested
from .cli import USER_ERRORS, BatchSize, Parser
from .devices import check_gpu
from .errors import run_main
from .records import RUN_RECORD, discard_new_run, new_run_dir, replaced, run_metrics, write_json
from .workarounds import lightning_notes_ignored


@dataclass
class CheckpointOptions:
    """The checkpoint, where to run it, and what of its run to change

    Args:
        ckpt_path: A .ckpt written by scripts/train.py.
        accelerator: cpu, gpu, cuda, mps or auto.
        data: Data module arguments to change, e.g. --data.data_dir DIR.
        batch_size: Samples per batch (default: the training run's).
    """

    ckpt_path: str
    accelerator: str = "auto"
    data: dict[str, Any] = field(default_factory=dict)
    batch_size: BatchSize | None = None


@dataclass
class Options:
    """How to test it

    Args:
        devices: How many devices (or which: [0, 1]).
        precision: e.g. 32-true, bf16-mixed, 16-mixed.
        output_dir: The new run folder (default: a new folder under runs/).
    """

    devices: int | str = 1
    precision: str | None = None
    output_dir: str | None = None


def build_parser() -> Parser:
    parser = Parser(description=__doc__, exit_on_error=False)
    parser.add_class_arguments(CheckpointOptions)  # predict.py's too
    parser.add_class_arguments(Options)
    return parser


def load_with_overrides(config: Namespace):
    """The checkpoints.Checkpoint of ``config.ckpt_path``, its data module built with CheckpointOptions's changes,
    for a command that runs it on ``config.accelerator`` (checked first) and prints its results, not the device
    banners."""
    check_gpu(config.accelerator)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    batch_size = {"batch_size": config.batch_size} if config.batch_size else {}
    return load_checkpoint(config.ckpt_path, **config.data | batch_size)  # the data module's signature checks them


def evaluate(config: Namespace) -> None:
    """A failed or stopped evaluation leaves no folder behind (one with its metrics.json stays)."""
    model, datamodule, epochs = load_with_overrides(config)
    # The processes Lightning starts for --devices N run this command again: only the first has a folder and writes.
    run_dir = new_run_dir(config.output_dir) if rank_zero_only.rank == 0 else None
    try:
        with lightning_notes_ignored():  # a progress bar in a terminal, none in a file or a pipe
            settings = {key: config[key] for key in ("accelerator", "devices", "precision")}
            trainer = Trainer(logger=False, callbacks=[progress_display(), BatchCheck()], **settings)
            results = trainer.test(model, datamodule=datamodule, verbose=False)
        check_tested(trainer)
        metrics = run_metrics(trainer, model, test=results[0], epochs=epochs, best_checkpoint=config.ckpt_path)
        if run_dir:  # results, then what was evaluated: a config.yaml alone would be a training run to restart
            write_json(run_dir / "metrics.json", metrics)
            with replaced(run_dir / RUN_RECORD) as file:
                file.write(build_parser().dump(config).encode())
            print(f"Test accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f}); {run_dir}")
    except BaseException:
        if run_dir:
            discard_new_run(run_dir)
        raise


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: evaluate(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)
