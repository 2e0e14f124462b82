"""Train with Lightning: fit, test the best checkpoint, write ``metrics.json`` in the run folder.
:mod:`mnist_lightning.core.cli` builds the objects; :func:`train` only runs them, so tests can call it directly."""

import importlib.util  # only with_plots
import os
import signal
import sys
from pathlib import Path

from lightning.pytorch.utilities.exceptions import SIGTERMException

from . import checks, resume
from .callbacks import EpochHistory, StopTogether
from .cli import USER_ERRORS, Training, build_training, parse_args
from .errors import TERMINATED, UserError, run_main
from .records import RUN_RECORD, discard_new_run, run_metrics, write_json
from .workarounds import lightning_notes_ignored, sigterm_to_stop_together


def train(job: Training) -> dict:
    """Fit (resuming from ``job.ckpt_path`` if given), test the best checkpoint; the metrics, also in metrics.json."""
    trainer, model, datamodule, ckpt_path = job
    run_dir = Path(trainer.default_root_dir)
    history = next(c for c in trainer.callbacks if isinstance(c, EpochHistory))
    StopTogether.received = False  # not a SIGTERM that stopped an earlier run in this process
    with lightning_notes_ignored():
        # weights_only: a checkpoint holds tensors and plain values only; nothing in it is run as code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        # A SIGTERM the fit noted after its last check for one (after its last batch) stops the run before its test.
        if trainer.received_sigterm or StopTogether.any_received(trainer):
            raise SIGTERMException
        if not trainer.num_training_batches:  # Lightning skips the fit, saying so in an info line only
            raise checks.no_batch(trainer, "train")
        if not trainer.global_step:  # a new run that trained nothing (a resumed one out of --max_time is tested)
            limits = "--max_epochs, --max_steps, --max_time or --limit_train_batches"
            raise UserError(f"The run's {limits} allowed no training step: there is no model to test.")
        # Before testing, which loading a checkpoint restores callbacks for: the whole run's fit time (a resumed run's
        # earlier segments are in its checkpoints) and its epochs.
        seconds, rows = history.fit_seconds(), history.rows  # (the test's restore replaces history.rows, not rows)
        best = trainer.checkpoint_callback  # tested: the weights that did best on validation, not merely the last ones
        best_path = (best and best.best_model_path) or None
        try:
            results = trainer.test(model, datamodule=datamodule, ckpt_path=best_path, weights_only=True)
            checks.check_tested(trainer)
        except (UserError, *USER_ERRORS) as error:  # the test data or a test setting: the fit is kept, to test later
            kept = where_the_run_stands(job)
            error.args = (f"{error} {kept[:1].upper()}{kept[1:]}",)
            raise
    score, seed = best and best.best_model_score, int(os.environ["PL_GLOBAL_SEED"])  # seed_everything's
    test = results[0] if results else {}  # none with --limit_test_batches 0
    # Its epochs: those its history holds (a fit stopped before it began leaves Lightning's count behind by one).
    metrics = run_metrics(trainer, model, test, epochs=len(rows), history=rows, fit_seconds=seconds)
    metrics |= {"best_val/acc": None if score is None else float(score), "best_checkpoint": best_path, "seed": seed}
    if trainer.is_global_zero:
        write_json(run_dir / "metrics.json", metrics)
        acc, weights = metrics["test/acc"], "best" if best and best.monitor else "last"  # without validation: last
        epochs = f"{len(rows)} epoch{'s' * (len(rows) != 1)}"
        tested = "Not tested" if acc is None else f"Test accuracy {100 * acc:.2f} % ({weights} of {epochs})"
        print(f"\n{tested}. Run folder: {run_dir}")
        # with_plots:
        # After the results line: a plot that fails leaves it said.
        if importlib.util.find_spec("matplotlib") and not trainer.fast_dev_run:  # no plots of a smoke test
            from .plots import save_plots  # matplotlib's import is slow: only runs that plot pay for it

            for path in save_plots(rows, model.test_confusion_matrix, run_dir):
                print(f"Plot: {path}")
        elif not trainer.fast_dev_run:
            print('Plots: pip install -e ".[plots]" for learning curves and a confusion matrix.')
        # end with_plots
    return metrics


def main(argv: list[str] | None = None) -> int:
    job = None
    sigterm_to_stop_together()

    def run():
        nonlocal job
        job = build_training(parse_args(argv))
        try:
            train(job)
        except BaseException as error:
            if not job.ckpt_path and job.trainer.is_global_zero:  # a new run that fails leaves no half-made folder
                discard_new_run(Path(job.trainer.default_root_dir))
            if isinstance(error, SIGTERMException):  # how Lightning stops a fit on SIGTERM: a SystemExit, status 0
                raise SystemExit(TERMINATED) from error
            code = error.code if isinstance(error, SystemExit) else None
            if code == TERMINATED and job.trainer.strategy.launcher:  # stopped at once, by train.py's SIGTERM handler:
                job.trainer.strategy.launcher.kill(signal.SIGTERM)  # the processes Lightning started would wait
            raise

    def stops_itself():  # on SIGTERM: a fit stops after a batch, under DDP every process after the same one
        if not (job and job.trainer.state.fn == "fit" and not job.trainer.state.stopped):
            return False
        StopTogether.received = True  # asked by StopTogether after each batch (DDP), and by train() after the fit
        # One process: noted by Lightning's handler, which calls this one once the fit's setup is done.
        return job.trainer.world_size > 1 or job.trainer.received_sigterm

    return run_main(run, USER_ERRORS, stops_itself, lambda: where_the_run_stands(job), exiting=argv is None)


def where_the_run_stands(job: Training | None) -> str:
    """Said after a stop or a failed write: what the run kept, and how to go on."""
    if job:
        run_dir = Path(job.trainer.default_root_dir)
        results, record = run_dir / "metrics.json", run_dir / RUN_RECORD
        # Written by this command (after its record), not left by the earlier segment of a run resumed to train longer.
        if results.is_file() and record.is_file() and results.stat().st_mtime_ns >= record.stat().st_mtime_ns:
            complete = f"the run is complete, its results are in {results}."
            complete += f" To draw its plots later: python -m mnist_lightning.core.plots {run_dir}"  # only with_plots
            return complete
        if (last := run_dir.resolve() / "checkpoints" / "last.ckpt").is_file():  # as the resume command names it
            return f"{last} holds the epochs finished before. Resume with:\n  {resume.resume_hint(run_dir)}"
    return "there is nothing to resume yet. Run the same command again."


if __name__ == "__main__":
    sys.exit(main())
