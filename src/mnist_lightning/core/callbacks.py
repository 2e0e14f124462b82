"""Callbacks of every training run: first batches checked, the per-epoch history (which stops a diverged run),
SIGTERM under DDP, and the progress display. One callback where one can do: Lightning calls each callback's hooks at
every step."""

import math
import random
import signal
import sys
import time

import numpy as np
import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .checks import no_batch
from .errors import UserError


class DivergedError(UserError):
    exit_code = 1


class FirstBatchCheck(Callback):
    """Each stage's first batch against what the model takes, its ``example_input_array`` (Lightning's own way to say
    it): samples that do not fit are named with their DataLoader, not found by a traceback from the step."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if batch_idx > 0 or not isinstance(example := pl_module.example_input_array, torch.Tensor):
            return
        samples = batch[0] if isinstance(batch, list | tuple) else batch  # (samples, targets), or samples alone
        # Of the weights' dtype: Lightning gives a -true precision's floats that dtype, and autocast takes float32.
        tensor = isinstance(samples, torch.Tensor)
        fits = tensor and samples.shape[1:] == example.shape[1:] and samples.dtype == example.dtype
        if fits and samples.isfinite().all():
            return
        got = f"{samples.dtype} {tuple(samples.shape)}" if tensor else f"a {type(samples).__name__}"
        raise UserError(
            f"The first batch of {type(trainer.datamodule).__name__}.{trainer.state.stage.dataloader_prefix}"
            f"_dataloader() holds samples of {got}, not the finite {example.dtype} samples of shape "
            f"{tuple(example.shape[1:])} that {type(pl_module).__name__} takes (its example_input_array)."
        )

    on_validation_batch_start = on_test_batch_start = on_predict_batch_start = on_train_batch_start

    def on_train_start(self, trainer, pl_module):
        """A validation set without a batch, as soon as it is known: after the sanity check, or the first epoch."""
        if trainer.num_val_batches and not any(trainer.num_val_batches):  # [] until Lightning first reads it
            raise no_batch(trainer, "val")

    on_train_epoch_end = on_train_start


class EpochHistory(FirstBatchCheck):
    """Besides the first batches' check: each epoch's time and every metric the model logs for it (printed as a line
    where the progress display is EpochLines), and the whole run's fit time, kept in its checkpoints for a resumed
    run. A metric that is not finite stops the run before its checkpoints are written: no record gets a NaN."""

    def __init__(self, record: str | None = None) -> None:
        # record: the fingerprint of the run's record (resume.fingerprint), which a resume checks; fit_seconds_before:
        # of a resumed run's earlier segments.
        self.record, self.rows, self.fit_seconds_before = record, [], 0.0
        self.on_train_start()

    def fit_seconds(self) -> float:
        return self.fit_seconds_before + time.perf_counter() - self._segment_start

    def on_train_start(self, trainer=None, pl_module=None):  # a run resumed mid-epoch has no on_train_epoch_start
        self._start = self._segment_start = time.perf_counter()
        if trainer:
            super().on_train_start(trainer, pl_module)

    def on_train_epoch_start(self, *args):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        # After validation; before the checkpoint callbacks, which Lightning runs last. float() waits for the device
        # (CUDA runs asynchronously) before the clock is read.
        super().on_train_epoch_end(trainer, pl_module)
        logged = sorted(trainer.callback_metrics.items())  # train/loss, val/f1, val/loss: stage, then name
        metrics = {name: float(value) for name, value in logged if value.numel() == 1}
        row = {"epoch": trainer.current_epoch, "seconds": time.perf_counter() - self._start} | metrics
        if diverged := [f"{name} {value}" for name, value in metrics.items() if not math.isfinite(value)]:
            raise DivergedError(
                f"Training diverged ({diverged[0]}): use a smaller learning rate; with 16-bit weights, a -mixed or "
                "32-true --precision."
            )
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]
        if isinstance(trainer.progress_bar_callback, EpochLines) and trainer.is_global_zero:
            epochs = f"/{trainer.max_epochs}" * (trainer.max_epochs > 0)  # -1: no limit
            shown = "".join(f"{name} {value:.4f}, " for name, value in metrics.items())
            print(f"Epoch {row['epoch'] + 1}{epochs}: {shown}{row['seconds']:.1f} s", flush=True)

    def state_dict(self) -> dict:
        return {"rows": self.rows, "fit_seconds": self.fit_seconds()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows, self.fit_seconds_before = state_dict["rows"], state_dict.get("fit_seconds", 0.0)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        # The random generators' states, as plain values and tensors: Lightning keeps none, and a resumed run would
        # draw other dropouts and batches.
        kind, keys, *rest = np.random.get_state()  # its key as a list of ints, which set_state takes back
        states = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": [kind, keys.tolist(), *rest]}
        states["cuda"] = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
        checkpoint |= {"record": self.record, "world_size": trainer.world_size, "random_states": states}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        states = checkpoint["random_states"]
        torch.set_rng_state(states["torch"])
        random.setstate(states["python"])
        np.random.set_state(states["numpy"])
        if len(states.get("cuda", ())) == torch.cuda.device_count() > 0:  # the GPUs it was saved on
            torch.cuda.set_rng_state_all(states["cuda"])


class StopTogether(Callback):
    """Under DDP, a SIGTERM to any process stops all of them after the same batch of the fit or the test: after each
    one they agree whether any was sent it. A process that stopped alone would leave the others waiting for it
    forever in their next collective (workarounds.note_sigterm). From its making (cli.build adds it to distributed
    runs only, once the Trainer is built) a SIGTERM is noted, not obeyed, and held (blocked) until ``setup``, once
    the processes have joined: the processes Lightning starts inherit it held, as one sent while they start must not
    end one of them alone (Lightning 2.6 then SIGKILLs every process)."""

    def __init__(self) -> None:
        self.received, self.restore = False, signal.signal(signal.SIGTERM, self.note)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def setup(self, trainer, pl_module, stage):
        signal.signal(signal.SIGTERM, self.note)  # (the test's: the fit's teardown put back the command's handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one held till now is noted now

    def note(self, signum, frame):  # Lightning's handler, during the fit, calls it too
        self.received = True

    def teardown(self, trainer, pl_module, stage):
        signal.signal(signal.SIGTERM, self.restore)

    def any_received(self, trainer) -> bool:
        return trainer.strategy.reduce_boolean_decision(self.received, all=False)

    def on_train_batch_end(self, trainer, *args):
        if self.any_received(trainer):
            raise SIGTERMException  # how Lightning stops a fit on SIGTERM

    on_test_batch_end = on_train_batch_end


def sigterm_received(trainer) -> bool:
    """Whether the fit noted a SIGTERM (in any process, under DDP) after its last check for one."""
    together = [callback.any_received(trainer) for callback in trainer.callbacks if isinstance(callback, StopTogether)]
    return trainer.received_sigterm or any(together)


def progress_display() -> ProgressBar:
    """A bar in a terminal; in a file (nohup, SLURM, CI), where a bar's redraws pile up, a line per epoch."""
    return ThrottledBar() if sys.stdout.isatty() else EpochLines()


# Measured: benchmarks/results/step_cost_cpu.json.  # only with_benchmarks
class ThrottledBar(TQDMProgressBar):
    """Lightning's TQDM bar, redrawn at most every 0.1 s and at a stage's end: redrawn every ``refresh_rate``
    batches, it can cost a small network's step again."""

    _drawn_at = 0.0

    def _due(self, batch_idx, batches):
        if due := batch_idx + 1 >= batches or time.monotonic() - self._drawn_at >= 0.1:
            self._drawn_at = time.monotonic()
        return due

    def on_train_batch_end(self, *args):  # (trainer, pl_module, outputs, batch, batch_idx)
        if self._due(args[4], self.total_train_batches):
            super().on_train_batch_end(*args)

    def on_validation_batch_end(self, *args):
        if self._due(args[4], self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(*args)


class EpochLines(ProgressBar):
    """No bar: EpochHistory prints a line as each epoch ends."""

    def disable(self):  # Lightning's call on every process but the first, which print nothing
        pass
