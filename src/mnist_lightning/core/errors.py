"""The one error boundary of every entry point (:func:`run_main`): a mistake with the template's own commands, files
or machine is one paragraph; a library's refusal of a value is its own message; an error in the user's code is
Python's traceback, after a line naming the hook that failed."""

import errno
import importlib.util
import os
import signal
import sys
import sysconfig
import traceback
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning_utilities.core.rank_zero import rank_zero_only

from .workarounds import apply_workarounds, end_process_group

USAGE_ERROR = 2  # the exit status argparse uses for a bad command line
INTERRUPTED = 130  # the shell's status for a program ended by Ctrl-C (128 + SIGINT)
TERMINATED = 143  # and by SIGTERM (kill, timeout, a scheduler's stop)
# The OS's refusals to write that a user mends (room, quota, a read-only disk), wherever they come from.
CANNOT_WRITE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}

MACHINERY = Path(__file__).resolve().parent
PACKAGE = MACHINERY.parent
LIBRARIES = tuple({sysconfig.get_path(name) for name in ("stdlib", "platstdlib")})  # Python's own modules
LIGHTNING = Path(importlib.util.find_spec("lightning").origin).parent  # whose checks of settings run in user hooks


class UserError(Exception):
    """A mistake with this template's commands, files or machine; the message says what was wrong and what to do."""

    exit_code = USAGE_ERROR


class WriteError(UserError):
    """A file could not be written (a full disk, a read-only or failing one); the message says which and why."""

    exit_code = 1

    def __init__(self, path: Path | str | None, error: OSError) -> None:
        super().__init__(f"{path or 'A file'} could not be written: {error.strerror or error}.")  # the OS's reason


def in_user_code(filename: str) -> bool:
    """Whether a file is the user's: the package's files outside core/, or any file not of Python or an installed
    library (site-packages, dist-packages, wherever the environment finds them)."""
    path = Path(filename).resolve()
    installed = {"site-packages", "dist-packages"} & set(path.parts) or str(path).startswith(LIBRARIES)
    # (Compiled code names no file of its own; the package may be installed, its files outside core/ still the user's.)
    return path.is_file() and not path.is_relative_to(MACHINERY) and (path.is_relative_to(PACKAGE) or not installed)


def report_failure(error: Exception) -> int:
    """An error not foreseen as a mistake: the user's code's with its traceback, after the line naming the last of
    their functions that the machinery, Lightning or jsonargparse called (the hook), or the import of their file; a
    library's refusal of a value (also Lightning's, of a setting, from within a user's hook) as its own message; the
    template's own faults raised on."""
    raised_in = Path(traceback.extract_tb(error.__traceback__)[-1].filename).resolve()
    seen, culprit = [], None if raised_in.is_relative_to(LIGHTNING) else error
    while culprit is not None and culprit not in seen:  # the error, then what caused it
        seen.append(culprit)
        codes = [frame.f_code for frame, _ in traceback.walk_tb(culprit.__traceback__)]
        # A hook: a function of the user's called from outside (the first frame of each run of theirs), or their file.
        hooks = [next(run) for mine, run in groupby(codes, lambda code: in_user_code(code.co_filename)) if mine]
        what = hooks and f"{getattr(hooks[-1], 'co_qualname', hooks[-1].co_name)}()"  # (co_qualname: Python 3.11)
        syntax = isinstance(culprit, SyntaxError) and culprit.filename and in_user_code(culprit.filename)  # no frame
        if syntax or (hooks and hooks[-1].co_name == "<module>"):
            what = f"importing {culprit.filename if syntax else hooks[-1].co_filename}"
        if what:
            print(f"Error: {what} of your code raised {type(culprit).__name__}; its traceback:", file=sys.stderr)
            traceback.print_exception(culprit)
            return 1
        culprit = culprit.__cause__ or culprit.__context__
    if raised_in.is_relative_to(PACKAGE):
        raise error
    print(f"Error: {str(error).strip() or type(error).__name__}", file=sys.stderr)
    return USAGE_ERROR


def run_main(command: Callable[[], object], exiting: bool = False) -> int:
    """Run an entry point: a UserError, or Lightning's MisconfigurationException (a setting that cannot work), is a
    paragraph on stderr and its exit status (``exit_code``, else 2); the OS refusing a write, the file and its reason.
    SIGTERM stops it as Ctrl-C does, through every clean-up (``finally``), then status 143. What the command kept,
    where it says (an exception's ``kept``, see :func:`mnist_lightning.core.runs.open_run`), follows the message.
    ``exiting``: the process ends with it (a command's ``main()``, given no arguments)."""
    apply_workarounds()
    if hasattr(sys.stdout, "reconfigure"):  # (a notebook's output has none) File names need not be UTF-8 text:
        sys.stdout.reconfigure(errors="backslashreplace")  # one printed in a UTF-8 locale is not a failure
    stops = []  # a second SIGTERM (a scheduler's, or to every process) must not cut the first one's clean-up

    def on_stop(signum, frame):  # SIGTERM, or SIGUSR1: a scheduler's notice that the job ends soon
        stops.append(signal.Signals(signum).name)
        if signum != signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGTERM)
        # During a fit, Lightning's handler replaces this one and calls it after noting the signal: the fit stops
        # after its batch (workarounds.note_sigterm).
        elif stops.count("SIGTERM") == 1 and signal.getsignal(signal.SIGTERM) is on_stop:
            sys.exit(TERMINATED)

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    # Not over a handler of the caller's; nor on SLURM's SIGUSR1, on which Lightning requeues the job.
    for signum in [signal.SIGTERM] + [signal.SIGUSR1] * (not SLURMEnvironment.detect()):
        if handlers[signum] == signal.SIG_DFL:
            signal.signal(signum, on_stop)
    try:
        command()
        for signum in handlers:  # done, its results written: a stop now would only report a failure that is not one
            signal.signal(signum, signal.SIG_IGN)
        end_process_group()
    except (KeyboardInterrupt, SystemExit) as stop:
        # Lightning ends a Trainer call stopped by Ctrl-C with exit(1), raised while it handles the KeyboardInterrupt.
        if not (ctrl_c := isinstance(stop, KeyboardInterrupt) or isinstance(stop.__context__, KeyboardInterrupt)):
            if not (isinstance(stop, SIGTERMException) or stop.code == TERMINATED):  # Lightning's, or ours
                raise
            end_process_group()
        if rank_zero_only.rank == 0:  # only a distributed run's first process reports
            said = "Interrupted" if ctrl_c else f"Stopped by {stops[0] if stops else 'SIGTERM'}"
            kept = getattr(stop, "kept", "")
            print(f"\n{said}: {kept}" if kept else f"\n{said}.", file=sys.stderr)
        return INTERRUPTED if ctrl_c else TERMINATED
    except BrokenPipeError:  # output piped into a command that stopped reading it (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's advice: no error at exit
        return 1
    except Exception as error:
        write_failed = isinstance(error, WriteError) or (isinstance(error, OSError) and error.errno in CANNOT_WRITE)
        if not (write_failed or isinstance(error, UserError | MisconfigurationException)):
            return report_failure(error)
        message = str(WriteError(error.filename, error)) if isinstance(error, OSError) else str(error)  # a library's
        kept = getattr(error, "kept", "") if write_failed else ""  # what the command kept, to go on with room
        print(" ".join(f"Error: {message} {kept[:1].upper()}{kept[1:]}".split()), file=sys.stderr)  # one paragraph
        return 1 if write_failed else getattr(error, "exit_code", USAGE_ERROR)
    finally:
        # A command run as a program (``exiting``) is done: a stop while Python shuts down (seconds, with torch
        # loaded) would only turn its status into a failure. Called from Python, the caller's handlers come back.
        for signum, handler in handlers.items():
            signal.signal(signum, signal.SIG_IGN if exiting else handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # held by a fit that failed to start
    return 0
