"""User mistakes end in one readable paragraph and a non-zero exit, never in a traceback."""

import importlib
import sys
import textwrap
from collections.abc import Callable

from .workarounds import apply_workarounds

USAGE_ERROR = 2  # the exit status argparse uses for a bad command line
INTERRUPTED = 130  # the shell's status for a program ended by Ctrl-C (128 + SIGINT)


class UserError(Exception):
    """A problem the user can fix; the message says what was wrong and what to do."""

    exit_code = USAGE_ERROR

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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
    return 0


def run_script(module: str) -> int:
    """What ``scripts/*.py`` run: import the entry point's module, then call its ``main()``. Importing torch and
    Lightning is the slow part of start-up; Ctrl-C during it ends quietly, as it does later on."""
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return INTERRUPTED
    return main()
