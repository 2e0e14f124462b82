"""Run folders: each run has one of its own, locked while a command writes it. Opening a run decides which folder this
process writes and whether the run is new, resumed or started over; a new run that fails leaves no folder behind."""

import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import yaml
from filelock import FileLock, Timeout
from lightning.pytorch.utilities import rank_zero_only

from .errors import UserError
from .records import RUN_RECORD
from .resume import refuse_finished_run, resume_hint

LOCK_FILE = ".lock"  # held by the command writing into a run folder (see locked)
UNSTARTED_RUN_ENTRIES = {RUN_RECORD, "logs", "checkpoints"}  # what a run killed before its first checkpoint leaves
RUN_DIR_VARIABLE = "MNIST_LIGHTNING_RUN_DIR"  # rank 0's choice of run folder, for the ranks Lightning starts


class Run(NamedTuple):
    dir: Path
    resume_from: str | None  # the run's last.ckpt, when it is resumed
    weights: str | None  # a checkpoint of another run whose weights it starts from (fine-tuning)


@contextmanager
def open_run(config) -> Iterator[Run]:
    """The run of train.py's ``config``, locked (by the first process) until the block ends: resumed from its
    last.ckpt (``--ckpt_path last``; a run killed before its first one is started over), else new. The processes
    Lightning, torchrun or srun start share the first one's folder. An exception leaving the block says in ``kept``
    what the run kept, which errors.run_main adds to what it says of a stop or a failed write."""
    weights = config.ckpt_path
    if resumed := weights == "last":  # a resumed run's own start is in its record, read before a restart clears it
        weights = yaml.safe_load((Path(config.output_dir) / RUN_RECORD).read_text()).get("ckpt_path")
    last = Path(config.output_dir or ".", "checkpoints", "last.ckpt")
    resuming = resumed and last.is_file()
    with ExitStack() as stack:
        if rank_zero_only.rank > 0:  # rank 0 has chosen (and passed it on), or torchrun gave every process the folder
            if not (shared := config.output_dir or os.environ.get(RUN_DIR_VARIABLE)):
                raise UserError("Processes started by torchrun or srun must all be given the same --output_dir.")
            run_dir = Path(shared)
        elif resuming:
            run_dir = stack.enter_context(locked(Path(config.output_dir)))
            refuse_finished_run(run_dir, config.max_epochs)
        else:
            run_dir = stack.enter_context(new_run(config.output_dir))
        os.environ[RUN_DIR_VARIABLE] = str(run_dir.resolve())  # inherited by the ranks Lightning launches
        try:
            yield Run(run_dir, str(run_dir / "checkpoints" / "last.ckpt") if resuming else None, weights)
        except BaseException as error:
            error.kept = where_the_run_stands(run_dir)
            raise


def where_the_run_stands(run_dir: Path) -> str:
    """Said after a stop or a failed write: what the run kept, and how to go on."""
    results, record = run_dir / "metrics.json", run_dir / RUN_RECORD
    # Written by this command (after its record), not left by the earlier segment of a run resumed to train longer.
    if results.is_file() and record.is_file() and results.stat().st_mtime_ns >= record.stat().st_mtime_ns:
        complete = f"the run is complete, its results are in {results}."
        complete += f" To draw its plots later: python -m mnist_lightning.core.plots {run_dir}"  # only with_plots
        return complete
    if (last := run_dir.resolve() / "checkpoints" / "last.ckpt").is_file():  # as the resume command names it
        return f"{last} holds the epochs finished before. Resume with:\n  {resume_hint(run_dir)}"
    return "there is nothing to resume yet. Run the same command again."


@contextmanager
def new_run(output_dir: str | Path | None, runs_root: str | Path = "runs") -> Iterator[Path]:
    """A new run's folder, locked until the block ends: ``output_dir`` if given and unused, else a new runs/<time>.
    Removed if the block fails before the run wrote its resume point or its results."""
    if output_dir is None:
        stamp = Path(runs_root, datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
        for n in range(1000):
            output_dir = Path(f"{stamp}_{n}" if n else stamp)
            with suppress(OSError):  # made here, not merely found free: commands started in one second get one each
                output_dir.mkdir(parents=True)
                break
            if not output_dir.exists():  # cannot be made (not taken): locked() says why
                break
    # Locked first: two runs started at once into one folder must not both find it unused.
    with locked(run_dir := Path(output_dir)):
        if not clear_unstarted_run(run_dir):
            raise UserError(f"{run_dir} already holds files from an earlier run: pass another --output_dir.")
        try:
            yield run_dir
        except BaseException:
            if not any((run_dir / name).is_file() for name in ("checkpoints/last.ckpt", "metrics.json")):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise


def clear_unstarted_run(folder: Path) -> bool:
    """Whether ``folder`` can take a run: it holds nothing, or only what a run killed before its first checkpoint
    leaves, which is cleared to start it over."""
    names = {path.name for path in folder.iterdir()} - {LOCK_FILE}
    if (names and not {RUN_RECORD} <= names <= UNSTARTED_RUN_ENTRIES) or any(folder.glob("checkpoints/*.ckpt")):
        return False
    for name in names - {RUN_RECORD}:  # logs/ and checkpoints/
        shutil.rmtree(folder / name)
    (folder / RUN_RECORD).unlink(missing_ok=True)
    return True


@contextmanager
def locked(folder: Path) -> Iterator[Path]:
    """``folder``, made and locked until the block ends or the process does, however (the OS drops the lock), naming
    the holder to others: refused if another command holds it. The lock holder removes the temporary files that a
    write killed midway left (see records.replaced)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(folder / LOCK_FILE, is_singleton=True)  # one this process holds is free to it: reentrant
        lock.acquire(timeout=1)  # with a second's patience: other commands starting look at it too, an instant
    except Timeout as error:  # the lock file names its holder
        holder = Path(error.lock_file).read_text().strip() or "another process"
        raise UserError(f"{Path(error.lock_file).parent} is in use by {holder}, which has not ended.") from None
    except OSError as error:  # the OS's own reason: no such folder, permission denied, file name too long...
        raise UserError(f"{folder} cannot be written: {error.strerror}. Pass another --output_dir.") from error
    try:
        # The command line as text, whatever bytes its arguments hold (a file name that is not UTF-8, say).
        (folder / LOCK_FILE).write_text(f"process {os.getpid()}: {shlex.join(sys.argv)}\n", errors="backslashreplace")
        for left in [*folder.glob(".*.partial"), *folder.glob("checkpoints/.*.partial")]:  # see replaced
            left.unlink()
        yield folder
    finally:
        lock.release()
