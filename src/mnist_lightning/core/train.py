"""Train with Lightning: fit, test the best checkpoint, write ``metrics.json`` (and plots) in the run folder.
:mod:`mnist_lightning.core.cli` builds the objects; :func:`train` only runs them, so tests can call it directly."""

import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .callbacks import EpochHistory, StopTogether
from .checks import check_tested
from .cli import USER_ERRORS, Training, build_training, parse_args
from .errors import TERMINATED, UserError, run_main
from .records import RUN_RECORD, discard_new_run, run_metrics, write_json
from .resume import resume_hint
from .workarounds import lightning_notes_ignored, sigterm_to_stop_together


def train(
    trainer: Trainer, model: LightningModule, datamodule: LightningDataModule, ckpt_path: str | None = None
) -> dict[str, Any]:
    """Fit (resuming from ``ckpt_path`` if given), test the best checkpoint; the metrics, also in metrics.json."""
    run_dir = Path(trainer.default_root_dir)
    history = next(c for c in trainer.callbacks if isinstance(c, EpochHistory))
    with lightning_notes_ignored():
        # weights_only: a checkpoint holds tensors and plain values only; nothing in it is run as code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    # A SIGTERM the fit noted after its last check for one (after its last batch) stops the run before its test.
    together = next((c for c in trainer.callbacks if isinstance(c, StopTogether)), None)
    if together.any_received(trainer) if together else trainer.received_sigterm:
        raise SIGTERMException
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    out_of_time = timer and timer.time_remaining() <= 0 and trainer.global_step == history.first_step  # resumed
    if trainer.global_step == 0 or out_of_time:
        empty = f"The data module {type(datamodule).__name__} gave no training batch (its train_dataloader() is empty)"
        limits = "The run took no training step: its --max_time (which counts earlier segments) or limits left none"
        cause = limits if trainer.num_training_batches else empty
        raise UserError(f"{cause}, so there is no trained model to test: give it more.")
    # Before testing, which loading a checkpoint restores callbacks for: the whole run's fit time (a resumed run's
    # earlier segments are in its checkpoints) and its epochs.
    fit_seconds, rows = history.fit_seconds(), list(history.rows)
    best = trainer.checkpoint_callback  # tested: the weights that did best on validation, not merely the last ones
    best_path = (best and best.best_model_path) or None
    try:
        with lightning_notes_ignored():
            results = trainer.test(model, datamodule=datamodule, ckpt_path=best_path, weights_only=True)
        check_tested(trainer)
    except (UserError, MisconfigurationException) as error:  # the test data or a test setting: the fit is kept
        last = run_dir / "checkpoints" / "last.ckpt"
        kept = f"{run_dir} keeps its logs, no checkpoint: once that is fixed, rerun with a new --output_dir"
        if last.is_file():
            kept = f"{last} keeps the trained epochs: once that is fixed, `{resume_hint(run_dir)}` tests it"
        error.args = (f"{str(error).rstrip('.')}. {kept} (with any corrected option added).",)
        raise
    score = best.best_model_score if best else None
    metrics = run_metrics(
        trainer,
        model,
        test=results[0] if results else {},  # none with --limit_test_batches 0
        epochs=trainer.current_epoch,
        history=rows,
        fit_seconds=fit_seconds,
        best_val_acc=None if score is None else float(score),
        best_checkpoint=best_path,
        seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),  # what seed_everything set
    )
    if trainer.fast_dev_run:  # a smoke test, said first: its numbers are of a few batches, not of a trained model
        metrics = {"fast_dev_run": int(trainer.fast_dev_run)} | metrics
    if trainer.is_global_zero:
        write_json(run_dir / "metrics.json", metrics)
        print_summary(metrics, run_dir)  # before the plots: a plot that cannot be written leaves the results said
        if importlib.util.find_spec("matplotlib") and not trainer.fast_dev_run:  # no plots of a smoke test
            from .plots import save_plots  # matplotlib's import is slow: only runs that plot pay for it

            for path in save_plots(rows, model.test_confusion_matrix, run_dir):
                print(f"Plot: {path}")
        elif not trainer.fast_dev_run:
            print('Plots: pip install -e ".[plots]" for learning curves and a confusion matrix.')
    return metrics


def print_summary(metrics: dict[str, Any], run_dir: Path) -> None:
    tested = "Not tested (--limit_test_batches 0)"
    if metrics["test/acc"] is not None:
        tested = f"Test accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f})"
    epochs, device = metrics["epochs"], f"{metrics['devices']} x {metrics['accelerator']}"
    said = f"{tested} after {epochs} epoch{'s' * (epochs != 1)}, fit in {metrics['fit_seconds']:.1f} s on {device}"
    said += f" ({metrics['precision']} precision)"
    if batches := metrics.get("fast_dev_run"):
        said = (
            f"Smoke test passed (--fast_dev_run): {batches} batch(es) of each stage ran; leave it out to train a model"
        )
    print(f"\n{said}.\nRun folder: {run_dir}")


def main(argv: list[str] | None = None) -> int:
    job: Training | None = None
    sigterm_to_stop_together()

    def run() -> None:
        nonlocal job
        try:
            job = build_training(parse_args(argv))
            if job.trainer.world_size > 1:  # until the processes have joined: see StopTogether
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                train(job.trainer, job.model, job.datamodule, job.ckpt_path)
            except BaseException:  # a new run that fails before its fit finished leaves no half-made folder behind
                if not job.resuming and job.trainer.is_global_zero and not fit_finished(job.trainer):
                    discard_new_run(job.run_dir)
                raise
        except SystemExit as stop:  # how Lightning ends a Trainer call stopped by SIGTERM, or by Ctrl-C (exit 1)
            if isinstance(stop, SIGTERMException):
                raise SystemExit(TERMINATED) from stop
            if stop.code == TERMINATED and job and job.trainer.strategy.launcher:
                # Stopped at once, outside the fit: the processes Lightning started for DDP would wait for this one.
                job.trainer.strategy.launcher.kill(signal.SIGTERM)
            if stop.code != TERMINATED and job and job.trainer.interrupted:
                raise KeyboardInterrupt from stop
            raise

    def stops_itself() -> bool:  # on SIGTERM: whether the fit (or train, after it) stops after a batch, having noted it
        state = job.trainer.state if job else None
        if not (state and state.fn == TrainerFn.FITTING and state.status == TrainerStatus.RUNNING):
            return False
        if job.trainer.world_size > 1:  # from the fit's start: the other processes are started, or joining
            next(c for c in job.trainer.callbacks if isinstance(c, StopTogether)).received = True
            return True
        # Noted by Lightning's handler, which calls this one; it is installed only once the fit's setup is done.
        return job.trainer.received_sigterm

    return run_main(run, USER_ERRORS, stops_itself, lambda: where_the_run_stands(job), exiting=argv is None)


def fit_finished(trainer: Trainer) -> bool:
    """The fit ended by its own limits, having trained: what the run wrote is its result, whatever fails after it."""
    state = trainer.state
    return trainer.global_step > 0 and (state.fn == TrainerFn.TESTING or state.status == TrainerStatus.FINISHED)


def where_the_run_stands(job: Training | None) -> str:
    """Said after a stop or a failed write: what the run kept, and how to go on."""
    if job is None:
        return "before training started. Run the same command again to start it."
    run_dir = job.run_dir
    results, record = run_dir / "metrics.json", run_dir / RUN_RECORD
    # Written by this command (after its record), not left by the earlier segment of a run resumed to train longer.
    if results.is_file() and record.is_file() and results.stat().st_mtime_ns >= record.stat().st_mtime_ns:
        plots = f"python -m mnist_lightning.core.plots {run_dir}"
        return f"the run is complete, its results are in {results}. To draw its plots later: {plots}"
    last = run_dir.resolve() / "checkpoints" / "last.ckpt"  # as in the resume command; never capitalized
    if last.is_file():
        return f"{last} holds the epochs finished before. Resume with:\n  {resume_hint(run_dir)}"
    if fit_finished(job.trainer):
        return f"the fit finished; {run_dir} keeps its record and logs, no checkpoint: rerun with a new --output_dir."
    return "no checkpoint holds its progress yet, so there is nothing to resume. Run the same command again."


if __name__ == "__main__":
    sys.exit(main())
