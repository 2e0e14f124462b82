"""Test a trained checkpoint on its data module's test set, on any accelerator; writes metrics.json, with the
keys of training's, and config.yaml, its options, in a new run folder."""

from contextlib import nullcontext
from dataclasses import dataclass

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.utilities import rank_zero_only

from .callbacks import FirstBatchCheck, progress_display
from .checkpoints import CheckpointOptions, load_with_overrides
from .checks import check_tested
from .cli import Parser
from .errors import run_main
from .records import RUN_RECORD, replaced, run_metrics, scores, write_json
from .runs import new_run
from .workarounds import lightning_notes_ignored


@dataclass
class Options:
    """How to test it

    Args:
        devices: How many devices (or which: [0, 1]).
        precision: e.g. 32-true, bf16-mixed, 16-mixed.
        output_dir: The new run folder (default: a new folder under runs/).
        limit_test_batches: Test batches (default: all); a whole number is that many, a fraction that share.
    """

    devices: int | str = 1
    precision: str | None = None
    output_dir: str | None = None
    limit_test_batches: int | float | None = None


def build_parser() -> Parser:
    parser = Parser(description=__doc__, exit_on_error=False)
    parser.add_class_arguments(CheckpointOptions)  # predict.py's too
    parser.add_class_arguments(Options)
    return parser


def evaluate(config: Namespace) -> None:
    """A failed or stopped evaluation leaves no folder behind (one with its metrics.json stays)."""
    model, datamodule, epochs = load_with_overrides(config)
    # The processes Lightning starts for --devices N run this command again: only the first has a folder and writes.
    with new_run(config.output_dir) if rank_zero_only.rank == 0 else nullcontext() as run_dir:
        with lightning_notes_ignored():  # a progress bar in a terminal, none in a file or a pipe
            settings = {key: config[key] for key in ("accelerator", "devices", "precision", "limit_test_batches")}
            trainer = Trainer(logger=False, callbacks=[progress_display(), FirstBatchCheck()], **settings)
            results = trainer.test(model, datamodule=datamodule, verbose=False)
        check_tested(trainer)
        metrics = run_metrics(trainer, model, test=results[0], epochs=epochs, best_checkpoint=config.ckpt_path)
        if run_dir:  # results, then what was evaluated: a config.yaml alone would be a training run to restart
            write_json(run_dir / "metrics.json", metrics)
            with replaced(run_dir / RUN_RECORD) as file:
                file.write(build_parser().dump(config).encode())
            print(f"Tested: {scores(results[0])}. Run folder: {run_dir}")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: evaluate(build_parser().parse_args(argv)), exiting=argv is None)
