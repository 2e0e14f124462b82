"""Train with Lightning: fit, test the best checkpoint, write ``metrics.json`` (and plots) in the run folder.
:mod:`mnist_lightning.core.cli` builds the objects; :func:`train` only runs them, so tests can call it directly."""

import importlib.util
import os
import signal
import sys
import time
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
from .errors import TERMINATED, UserError, WriteError, run_main
from .records import RUN_RECORD, discard_new_run, run_metrics, write_json
from .resume import resume_hint
from .workarounds import lightning_notes_ignored, sigterm_to_stop_together


class NothingTrainedError(UserError):
    exit_code = 2


def train(
    trainer: Trainer, model: LightningModule, datamodule: LightningDataModule, ckpt_path: str | None = None
) -> dict[str, Any]:
    """Fit (resuming from ``ckpt_path`` if given), test the best checkpoint; the metrics, also in metrics.json."""
    run_dir = Path(trainer.default_root_dir)
    history = next((c for c in trainer.callbacks if isinstance(c, EpochHistory)), None)
    start = time.perf_counter()
    with lightning_notes_ignored():
        # weights_only: a checkpoint holds tensors and plain values only; nothing in it is run as code.
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    # A SIGTERM the fit noted after its last check for one (after its last batch) stops the run before its test.
    together = next((c for c in trainer.callbacks if isinstance(c, StopTogether)), None)
    if together.any_received(trainer) if together else trainer.received_sigterm:
        raise SIGTERMException
    if trainer.global_step == 0 and trainer.num_training_batches == 0:
        raise NothingTrainedError(
            f"The data module {type(datamodule).__name__} gave no training batch (its train_dataloader() is empty), "
            "so there is no trained model to test: give it training samples."
        )
    if trainer.global_step == 0:
        raise NothingTrainedError(
            "The run ended before its first training step (its time limit or batch limits left no step), so there "
            "is no trained model to test. Give it more: a larger --max_time, --limit_train_batches or --max_epochs."
        )
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    if history and trainer.global_step == history.first_step and timer and timer.time_remaining() <= 0:
        raise NothingTrainedError(
            f"The resumed run took no training step: --max_time limits the whole run's training time, and its "
            f"earlier segments had already used it ({timer.time_elapsed():.0f} s). Resume with a larger "
            "--max_time, or without it to train to --max_epochs."
        )
    # The whole run's fit time: a resumed run adds this segment to the earlier ones' (kept in its checkpoints).
    fit_seconds = history.fit_seconds() if history else time.perf_counter() - start
    rows = list(history.rows) if history else []  # before testing: loading a checkpoint restores callbacks too
    # Test the weights that did best on validation, not merely the last ones.
    best = trainer.checkpoint_callback
    best_path = best.best_model_path if best else ""
    try:
        with lightning_notes_ignored():
            results = trainer.test(
                model, datamodule=datamodule, ckpt_path=best_path or None, verbose=False, weights_only=True
            )
        check_tested(trainer)
    except (UserError, MisconfigurationException) as error:  # the test data or a test setting: the fit is kept
        last = run_dir / "checkpoints" / "last.ckpt"
        fix = f"{run_dir} keeps the fit's record and logs, but no checkpoint to test: once that is fixed, run the "
        fix += "command again with a new --output_dir"
        if last.is_file():
            fix = f"{last} keeps the trained epochs: once that is fixed, `{resume_hint(run_dir)}` tests it (with any "
            fix += "corrected option added)"
        error.args = (f"{str(error).rstrip('.')}. {fix}.",)
        raise
    metrics = run_metrics(
        trainer,
        model,
        test=results[0] if results else {},  # none with --limit_test_batches 0
        epochs=trainer.current_epoch,
        history=rows,
        fit_seconds=fit_seconds,
        best_val_acc=float(best.best_model_score) if best and best.best_model_score is not None else None,
        best_checkpoint=best_path or None,
        seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),  # what seed_everything set
    )
    if trainer.fast_dev_run:  # a smoke test, said first: its numbers are of a few batches, not of a trained model
        metrics = {"fast_dev_run": int(trainer.fast_dev_run)} | metrics
    if trainer.is_global_zero:
        write_json(run_dir / "metrics.json", metrics)
        print_summary(metrics, run_dir)  # before the plots: a plot that cannot be written leaves the results said
        if importlib.util.find_spec("matplotlib") and not trainer.fast_dev_run:
            from .plots import save_plots  # matplotlib's import is slow: only runs that plot pay for it

            for path in save_plots(rows, model.test_confusion_matrix, run_dir):
                print(f"Plot: {path}")
        elif not trainer.fast_dev_run:
            print('Plots: pip install -e ".[plots]" for learning curves and a confusion matrix.')
    return metrics


def print_summary(metrics: dict[str, Any], run_dir: Path) -> None:
    shown = [path for path in sorted(run_dir.iterdir()) if not path.name.startswith(".")]
    contents = ", ".join(path.name + "/" * path.is_dir() for path in shown)
    if batches := metrics.get("fast_dev_run"):
        print(
            f"\nSmoke test passed (--fast_dev_run): {batches} batch{'es' * (batches > 1)} of training, validation and "
            "testing ran. No checkpoint was kept, and the accuracy of so few samples says nothing of the model: "
            f"leave out --fast_dev_run to train it.\nRun folder: {run_dir}  ({contents})"
        )
        return
    tested = (
        f"Test accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f})"
        if metrics["test/acc"] is not None
        else "Not tested (--limit_test_batches 0)"
    )
    print(
        f"\n{tested} after {metrics['epochs']} epoch{'s' * (metrics['epochs'] != 1)}, fit in "
        f"{metrics['fit_seconds']:.1f} s on "
        f"{metrics['devices']} x {metrics['accelerator']} ({metrics['precision']} precision).\n"
        f"Run folder: {run_dir}  ({contents})"
    )


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
        except WriteError as error:  # a full disk, say: what was kept, and how to go on once there is room
            where = where_the_run_stands(job)
            error.args = (f"{error} {where[0].upper()}{where[1:]}",)
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


def where_the_run_stands(training: Training | None) -> str:
    if training is None:
        return "before training started. Run the same command again to start it."
    results, record = training.run_dir / "metrics.json", training.run_dir / RUN_RECORD
    # Written by this command (after its record), not left by the earlier segment of a run resumed to train longer.
    if results.is_file() and record.is_file() and results.stat().st_mtime_ns >= record.stat().st_mtime_ns:
        return (
            f"the run is complete, its results are in {training.run_dir / 'metrics.json'}. To draw its plots later: "
            f"python -m mnist_lightning.core.plots {training.run_dir}"
        )
    last = training.run_dir.resolve() / "checkpoints" / "last.ckpt"  # as in the resume command; never capitalized
    if last.is_file():
        return f"{last} holds the epochs finished before. Resume with:\n  {resume_hint(training.run_dir)}"
    if fit_finished(training.trainer):
        return (
            f"the fit finished, and {training.run_dir} keeps every file the run wrote ({RUN_RECORD}, its logs of every "
            "epoch and of the test if it ran). With no checkpoint (--enable_checkpointing false) it cannot be resumed "
            "to write the rest: run the same command again with a new --output_dir."
        )
    kept = "--enable_checkpointing false keeps none"
    if training.trainer.checkpoint_callback:  # also where the first checkpoint's write failed
        kept = "it stopped before writing its first"
    return (
        f"no checkpoint holds its progress ({kept}), so there is nothing to resume. Run the same command again to "
        "start over."
    )


if __name__ == "__main__":
    sys.exit(main())
