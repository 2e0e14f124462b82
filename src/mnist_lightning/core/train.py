"""Train with Lightning: open the run, build its objects, fit, test the best checkpoint, write ``metrics.json``.
:func:`run` is ``scripts/train.py``; :func:`train` only runs what :mod:`mnist_lightning.core.cli` built, so tests can
call each step directly."""

import importlib.util  # only with_plots
import os
import signal
import sys
from pathlib import Path

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.exceptions import SIGTERMException

from . import checks
from .callbacks import EpochHistory, sigterm_received
from .cli import Training, build, parse_args
from .errors import TERMINATED, UserError, run_main
from .records import run_metrics, scores, write_json
from .resume import resume_hint
from .runs import open_run
from .workarounds import lightning_notes_ignored


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: run(argv), exiting=argv is None)


def run(argv: list[str] | None = None) -> dict:
    """The command line parsed, the run opened (its folder: new, resumed or started over), built, trained, tested."""
    config = parse_args(argv)
    with open_run(config) as opened:
        return train(build(config, opened))


def train(job: Training) -> dict:
    """Fit (resuming from ``job.ckpt_path`` if given), test the best checkpoint; the metrics, also in metrics.json."""
    trainer, model, datamodule, ckpt_path, best = job
    run_dir = Path(trainer.default_root_dir)
    history = next(c for c in trainer.callbacks if isinstance(c, EpochHistory))
    try:
        with lightning_notes_ignored():
            # weights_only: a checkpoint holds tensors and plain values only; nothing in it is run as code.
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
            if sigterm_received(trainer):  # noted after the fit's last check for one: the run stops before its test
                raise SIGTERMException
            if not trainer.num_training_batches:  # Lightning skips the fit, saying so in an info line only
                raise checks.no_batch(trainer, "train")
            if not trainer.global_step:  # a new run that trained nothing (a resumed one out of --max_time is tested)
                limits = "--max_epochs, --max_steps, --max_time or --limit_train_batches"
                raise UserError(f"The run's {limits} allowed no training step: there is no model to test.")
            # Before testing, which loading a checkpoint restores callbacks for: the whole run's fit time (a resumed
            # run's earlier segments are in its checkpoints) and its epochs.
            seconds, rows = history.fit_seconds(), history.rows  # (the test's restore replaces history.rows)
            best_path = (best and best.best_model_path) or None  # the model's best weights; else its last ones
            try:
                results = trainer.test(model, datamodule=datamodule, ckpt_path=best_path, weights_only=True)
                checks.check_tested(trainer)
            except (UserError, MisconfigurationException) as error:  # the test data or a test setting: fit kept
                error.args = (f"{error} {untested(run_dir)}",)
                raise
    except SystemExit as stop:  # ended at once by a SIGTERM outside a fit's or test's batches (errors.run_main)
        if stop.code == TERMINATED and trainer.strategy.launcher:
            trainer.strategy.launcher.kill(signal.SIGTERM)  # the processes Lightning started would wait for this one
        raise
    test = results[0] if results else {}  # none with --limit_test_batches 0
    seed = int(os.environ["PL_GLOBAL_SEED"])  # seed_everything's
    # Its epochs: those its history holds (a fit stopped before it began leaves Lightning's count behind by one).
    metrics = run_metrics(trainer, model, test, epochs=len(rows), history=rows, fit_seconds=seconds, seed=seed)
    last = run_dir / "checkpoints" / "last.ckpt"  # what was tested without a best: the last weights
    metrics["best_checkpoint"] = best_path or (str(last) if last.is_file() else None)
    if best_path:
        metrics[f"best_{best.monitor}"] = float(best.best_model_score)
    if trainer.is_global_zero:
        write_json(run_dir / "metrics.json", metrics)
        epochs = f"{len(rows)} epoch{'s' * (len(rows) != 1)}"
        tested = f"Tested the {'best' if best_path else 'last'} of {epochs}: {scores(test)}" if test else "Not tested"
        print(f"\n{tested}. Run folder: {run_dir}")
        # with_plots:
        # After the results line: a plot that fails leaves it said.
        if importlib.util.find_spec("matplotlib") and not trainer.fast_dev_run:  # no plots of a smoke test
            from .plots import save_plots  # matplotlib's import is slow: only runs that plot pay for it

            for path in save_plots(rows, getattr(model, "test_confusion_matrix", None), run_dir):
                print(f"Plot: {path}")
        elif not trainer.fast_dev_run:
            print('Plots: pip install -e ".[plots]" for learning curves and a confusion matrix.')
        # end with_plots
    return metrics


def untested(run_dir: Path) -> str:
    """Said when the test fails after a complete fit: how to test the kept run once the cause is mended."""
    return (
        f"The fit is complete and kept in {run_dir}. Once this is mended, test it by resuming, which may change "
        f"--limit_test_batches and the data's --data.data_dir: {resume_hint(run_dir)}"
    )


if __name__ == "__main__":
    sys.exit(main())
