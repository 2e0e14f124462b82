"""Test a trained checkpoint on its data module's test set, on any accelerator; writes metrics.json, with the
keys of training's, and config.yaml, its options, in a new run folder."""

import logging
from typing import Any

from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer

from .callbacks import BatchCheck, progress_display
from .checkpoints import Checkpoint, load_checkpoint
from .checks import check_tested
from .cli import USER_ERRORS, BatchSize, Parser
from .devices import check_gpu
from .errors import run_main
from .records import RUN_RECORD, discard_new_run, new_run_dir, replaced, run_metrics, write_json
from .workarounds import lightning_notes_ignored


def build_parser() -> ArgumentParser:
    parser = Parser(prog="evaluate.py", description=__doc__, exit_on_error=False)
    add_checkpoint_options(parser)
    parser.add_argument("--devices", type=int | str, default=1, help="How many devices (or which: [0, 1]).")
    parser.add_argument("--precision", type=str | None, default=None, help="e.g. 32-true, bf16-mixed, 16-mixed.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Unset: a new folder in runs/.")
    return parser


def add_checkpoint_options(parser: ArgumentParser) -> None:
    """--ckpt_path, what of its training run's data module to change (a data_dir that moved, a batch size), and
    the accelerator to run it on."""
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    parser.add_argument("--data", type=dict[str, Any], default={}, help="Data module arguments: --data.data_dir DIR.")
    parser.add_argument("--batch_size", type=BatchSize | None, default=None, help="Unset: the training run's.")


def load_with_overrides(config: Namespace) -> Checkpoint:
    """The checkpoint of ``config.ckpt_path``, its data module built with add_checkpoint_options's changes, for a
    command that runs it on ``config.accelerator`` (checked first) and prints its results, not the device banners."""
    check_gpu(config.accelerator)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    batch_size = {"batch_size": config.batch_size} if config.batch_size else {}
    return load_checkpoint(config.ckpt_path, **config.data | batch_size)  # the data module's signature checks them


def evaluate(config: Namespace) -> None:
    """A failed or stopped evaluation leaves no folder behind (one with its metrics.json stays)."""
    model, datamodule, epochs = load_with_overrides(config)
    run_dir = new_run_dir(config.output_dir)
    try:
        with replaced(run_dir / RUN_RECORD) as file:  # what was evaluated, and how
            file.write(build_parser().dump(config.clone().update(str(run_dir), "output_dir")).encode())
        settings = {key: config[key] for key in ("accelerator", "devices", "precision")}
        with lightning_notes_ignored():  # a progress bar in a terminal, none in a file or a pipe
            trainer = Trainer(logger=False, callbacks=[progress_display(), BatchCheck()], **settings)
            results = trainer.test(model, datamodule=datamodule, verbose=False)
        check_tested(trainer)
        metrics = run_metrics(trainer, model, test=results[0], epochs=epochs, best_checkpoint=config.ckpt_path)
        if trainer.is_global_zero:
            write_json(run_dir / "metrics.json", metrics)
            print(f"Test accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f}); {run_dir}")
    except BaseException:
        discard_new_run(run_dir)
        raise


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: evaluate(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)
