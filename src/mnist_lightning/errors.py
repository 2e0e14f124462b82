"""User mistakes end in one readable paragraph and a non-zero exit, never in a traceback."""

import argparse
import errno
import importlib
import math
import os
import shutil
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .workarounds import apply_workarounds, end_process_group

USAGE_ERROR = 2  # the exit status argparse uses for a bad command line
INTERRUPTED = 130  # the shell's status for a program ended by Ctrl-C (128 + SIGINT)


class UserError(Exception):
    """A problem the user can fix; the message says what was wrong and what to do."""

    exit_code = USAGE_ERROR

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WriteError(Exception):
    """A file could not be written (a full disk, a read-only or failing one); the message says which and why."""

    exit_code = 1

    def __init__(self, path: Path, error: BaseException) -> None:
        free = shutil.disk_usage(path.parent).free if path.parent.is_dir() else None
        # torch reports a write cut short by a full disk as "[enforce fail at inline_container.cc] unexpected pos"
        full = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "unexpected pos" in str(error)
        if full or (free is not None and free < 2**20):
            reason = "the disk is full" + (f" ({free / 2**20:.1f} MB free there)" if free is not None else "")
        else:
            reason = getattr(error, "strerror", None) or str(error).strip().splitlines()[0]
        super().__init__(f"{path} could not be written: {reason}.")


class NothingToPredict(ValueError):
    """A file given to predict.py holds no input (a blank picture, say): reported as blank, not as an error."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as a UserError: one paragraph, no usage dump."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message[0].upper()}{message[1:]}. Run `python scripts/{self.prog} --help` for every option.")


def bounded(kind: type = int, lowest: float | None = None, highest: float | None = None, above: bool = False):
    """An argparse ``type``: a number of ``kind`` within its valid range (``above``: strictly above ``lowest``)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text} is not {'a whole number' if kind is int else 'a number'}"
            ) from None
        if math.isnan(value) or math.isinf(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        too_low = lowest is not None and (value <= lowest if above else value < lowest)
        if not math.isfinite(value) or too_low or (highest is not None and value > highest):
            low = f"above {lowest}" if above else f"at least {lowest}"
            valid = low if highest is None else f"{low} and at most {highest}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {valid}")
        return value

    return parse


def true_or_false(text: str) -> bool:
    """An argparse ``type`` for on/off flags, spelled as in train.py's: ``--compile true``."""
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


def print_error(message: str) -> None:
    paragraph = " ".join(message.split())
    print(
        textwrap.fill(f"Error: {paragraph}", width=100, break_on_hyphens=False, break_long_words=False), file=sys.stderr
    )


def run_main(main: Callable[[], object], user_errors: tuple[type[Exception], ...] = ()) -> int:
    """Run an entry point. A UserError, or one of ``user_errors`` (the errors that the project's own classes
    raise in their own terms), becomes a paragraph on stderr and its exit status (``exit_code``, else 2)."""
    apply_workarounds()
    try:
        main()
    except (UserError, *user_errors) as error:
        print_error(str(error))
        return getattr(error, "exit_code", USAGE_ERROR)
    except KeyboardInterrupt:  # Ctrl-C outside training (start-up, testing): nothing to save there
        print("\nInterrupted.", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # output piped into a command that stopped reading it (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's advice: no error at exit
        return 1
    finally:
        from .records import release  # here: this module is imported before torch (see run_script)

        release()  # the run folders it locked (records.lock): a later command in this process may use them
    end_process_group()
    return 0


def run_script(module: str) -> int:
    """What ``scripts/*.py`` run: import the entry point's module, then call its ``main()``.

    Importing torch and Lightning is the slow part of start-up. A KeyboardInterrupt raised inside it can be
    swallowed by a library's broad ``except`` and leave a half-imported module that fails later with a
    misleading traceback; so until the imports are done, Ctrl-C ends the process at once (nothing has been
    written yet), with the shell's status for it.
    """

    def interrupted_while_importing(signum: int, frame: object) -> None:
        print("\nInterrupted.", file=sys.stderr, flush=True)
        os._exit(INTERRUPTED)

    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not if the caller ignores Ctrl-C
    if ours:
        signal.signal(signal.SIGINT, interrupted_while_importing)
    try:
        main = importlib.import_module(module).main
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return main()
