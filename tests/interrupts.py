"""Interrupt training as a user would (Ctrl-C, SIGTERM, kill -9 at a moment of the harness's choosing), then do
what the user does next: paste the command the run printed, or, after kill -9 (which prints nothing), the
resume command of the README. Repeat until the run finishes; compare it with an uninterrupted run.

The harness of tests/test_faults.py and test_ddp_stop.py, for any script that interrupts runs: it imports nothing
from the tests. The project's train command is ``python tests/command.py train``: scripts/train.py on the task that
TEST_MODEL and TEST_DATA_MODULE name (the tests' own, from conftest.py's ``task``); a printed or documented
``python scripts/train.py ...`` is run as that command.
"""

import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from lightning.pytorch import Callback

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
RESUME_LINE = re.compile(r"Resume with:\n\s+(.+)")
TRAIN = ["tests/command.py", "train"]  # scripts/train.py, on the task the environment names
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def train_command(flags: list[str], output_dir: Path) -> list[str]:
    return [sys.executable, *TRAIN, *flags, "--output_dir", str(output_dir)]


def user_environment() -> dict[str, str]:
    """A shell whose ``python`` is this interpreter, as in an activated virtual environment (and which can import
    this module, for ``--callbacks interrupts.SignalAt``, and the tests' task)."""
    path = [str(Path(__file__).parent), str(ROOT / "src"), os.environ.get("PYTHONPATH")]
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, path)),
    }


def as_run(command: list[str] | str) -> tuple[list[str], dict[str, str]]:
    """A command line as a POSIX shell runs a simple command: its words (shlex), after the ``NAME=value`` assignments
    it starts with, which go into its environment; ``python scripts/train.py`` is the project's train command."""
    words, environment = shlex.split(command) if isinstance(command, str) else list(command), user_environment()
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        environment[name] = value
    if words[1:2] == ["scripts/train.py"]:
        words[1:2] = TRAIN
    return words, environment


class SignalAt(Callback):
    """Send a signal to this very process at an exact moment of training, once (the marker file remembers):
    ``--callbacks interrupts.SignalAt --callbacks.signal SIGTERM --callbacks.moment validation ...``.

    moment: ``setup`` (the fit's setup, before Lightning's own signal handling), ``batch`` (the start of training
    batch ``step``), ``validation`` (the second validation batch of epoch ``epoch``), ``checkpoint`` (while a
    checkpoint of epoch ``epoch`` is being put together, before its file is written), ``train_end`` (after the fit's
    last batch: after Lightning's last check for a stop), ``fit_end`` (the fit's last hook), ``test`` (the second
    batch of the test after the fit). ``rank``: only the process of that global rank sends it (under DDP).
    """

    def __init__(
        self, signal: str, moment: str, marker: str, epoch: int = 1, step: int = 3, rank: int | None = None
    ) -> None:
        self.signal, self.moment, self.marker, self.epoch, self.step = signal, moment, Path(marker), epoch, step
        self.rank = rank

    def _fire(self, trainer=None) -> None:
        if self.rank is not None and trainer is not None and trainer.global_rank != self.rank:
            return
        if not self.marker.exists():
            self.marker.write_text(f"{self.signal} at {self.moment}")
            os.kill(os.getpid(), signal.Signals[self.signal])

    def setup(self, trainer, pl_module, stage) -> None:
        if self.moment == "setup" and stage == "fit":
            self._fire()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.moment == "batch" and trainer.global_step == self.step:
            self._fire()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        during_fit = not trainer.sanity_checking and trainer.current_epoch == self.epoch
        if self.moment == "validation" and during_fit and batch_idx == 1:
            self._fire()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.moment == "checkpoint" and trainer.current_epoch == self.epoch:
            self._fire()

    def on_train_end(self, trainer, pl_module) -> None:
        if self.moment == "train_end":
            self._fire()

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.moment == "fit_end":
            self._fire()

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if self.moment == "test" and batch_idx == 1:
            self._fire(trainer)


class PauseAt(Callback):
    """Wait after epoch ``epoch`` (and its checkpoint) until the file ``go`` exists, two minutes at most:
    ``--callbacks interrupts.PauseAt --callbacks.go <file>``; a test does something while the run is mid-way."""

    def __init__(self, go: str, epoch: int = 0) -> None:
        self.go, self.epoch = Path(go), epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        deadline = time.monotonic() + 120
        while trainer.current_epoch == self.epoch + 1 and not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def checkpoint_loads(path: Path) -> bool:
    try:
        return "state_dict" in torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return False


@dataclass
class Interrupt:
    signal: str
    after_seconds: float  # after the process started
    exit_code: int | None = None
    printed_resume: str | None = None  # the command the run printed, if any
    last_ckpt_loads: bool = False
    stderr_tail: str = ""
    ignored: bool = False  # the run did not stop within the harness's timeout


@dataclass
class Campaign:
    interrupts: list[Interrupt] = field(default_factory=list)
    final_exit_code: int | None = None
    final_stderr: str = ""
    finished_early: bool = False  # the run finished before the last interrupt: there was nothing left to resume

    def resumed(self) -> list[bool]:
        """For each interrupt, whether the next command continued the run: it finished it, or was itself
        interrupted, rather than failing with an error (exit status 1 or 2)."""
        next_codes = [event.exit_code for event in self.interrupts[1:]] + [self.final_exit_code]
        return [code not in (1, 2) for code in next_codes]

    def as_dict(self) -> dict:
        return asdict(self)


def start(command: list[str] | str) -> subprocess.Popen:
    """Run ``command``; a string is a command line as a user pastes it, run as a POSIX shell runs a simple command
    (:func:`as_run`), so that the signals sent later reach python itself and not a shell."""
    words, environment = as_run(command)
    # Started as a user's shell would: Ctrl-C (SIGINT) is delivered, not ignored as in a background job.
    return subprocess.Popen(
        words,
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def interrupt(process: subprocess.Popen, name: str, delay: float, timeout: float = 300) -> Interrupt:
    """Send ``name`` to the running process ``delay`` seconds after it started; wait for it to end."""
    started = time.monotonic()
    while process.poll() is None and time.monotonic() - started < delay:
        time.sleep(0.01)
    event = Interrupt(name, round(time.monotonic() - started, 2))
    if process.poll() is None:
        process.send_signal(SIGNALS[name])
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The signal did not stop the run: recorded as such, and the run is killed (as a user would, with kill -9),
        # so that no orphan goes on training in the run folder.
        event.ignored = True
        process.kill()
        _, stderr = process.communicate()
    event.exit_code = process.returncode
    found = RESUME_LINE.findall(stderr)
    event.printed_resume = found[-1].strip() if found else None
    event.stderr_tail = stderr[-1500:]
    return event


def next_command(first: list[str], output_dir: Path, printed: str | None) -> list[str] | str:
    """What the user runs next: the printed command verbatim; after kill -9, the README's resume command if
    the run folder has a record, else the first command again."""
    if printed:
        return printed
    if (output_dir / "config.yaml").is_file():
        return shlex.join(["python", "scripts/train.py", "--output_dir", str(output_dir), "--ckpt_path", "last"])
    return first


def interrupt_and_resume(
    flags: list[str], output_dir: Path, moments: list[tuple[str, float]], timeout: float = 600
) -> Campaign:
    """Run ``flags``; for each (signal, seconds) interrupt the current process at that moment, then run what a
    user would run next; finally let the last command finish. Returns what happened at each step."""
    first = train_command(flags, output_dir)
    campaign = Campaign()
    command: list[str] | str = first
    for name, delay in moments:
        process = start(command)
        event = interrupt(process, name, delay, timeout)
        event.last_ckpt_loads = checkpoint_loads(output_dir / "checkpoints" / "last.ckpt")
        campaign.interrupts.append(event)
        if (output_dir / "metrics.json").is_file():  # the run had finished before the signal came, or as it came
            campaign.finished_early = True
            return campaign
        command = next_command(first, output_dir, event.printed_resume)
    process = start(command)
    _, stderr = process.communicate(timeout=4 * timeout)  # the rest of the run, uninterrupted
    campaign.final_exit_code, campaign.final_stderr = process.returncode, stderr[-3000:]
    return campaign


def random_moments(count: int, seed: int, longest: float, names=tuple(SIGNALS)) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    return [(rng.choice(names), round(rng.uniform(0.5, longest), 2)) for _ in range(count)]


def compare_runs(interrupted: Path, whole: Path) -> dict:
    """The two runs' final weights and records, side by side: what must be equal, and how far apart they are."""
    a = torch.load(whole / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    b = torch.load(interrupted / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    weight_difference = max((a[key].float() - b[key].float()).abs().max().item() for key in a)
    ma = json.loads((whole / "metrics.json").read_text())
    mb = json.loads((interrupted / "metrics.json").read_text())
    logged = sorted({key for row in ma["history"] for key in row} - {"epoch", "seconds"})  # what the model logs
    history = (
        {key: max(abs(x[key] - y[key]) for x, y in zip(ma["history"], mb["history"], strict=True)) for key in logged}
        if len(ma["history"]) == len(mb["history"])
        else None
    )
    scores = [key for key in ma if key.startswith(("test/", "best_")) and key != "best_checkpoint"]
    return {
        "same_keys": sorted(a) == sorted(b),
        "max_weight_difference": weight_difference,
        "scores": {key: [mb.get(key), ma[key]] for key in scores},  # the test's metrics, the best monitored score
        "history_epochs": [row["epoch"] for row in mb["history"]],
        "max_history_difference": history,
    }
