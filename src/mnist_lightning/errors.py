"""User mistakes end in one readable paragraph and a non-zero exit, never in a traceback."""

import sys
import textwrap
import warnings
from collections.abc import Callable

USAGE_ERROR = 2  # the exit status argparse uses for a bad command line


class UserError(Exception):
    """A problem the user can fix; the message says what was wrong and what to do."""

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run_main(main: Callable[[], object]) -> int:
    """Run an entry point; a UserError becomes a wrapped paragraph on stderr and its exit status."""
    # Lightning 2.6 with torch >= 2.13 warns about its own use of a torch API at every run; not the user's concern.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    try:
        main()
    except UserError as error:
        paragraph = " ".join(str(error).split())
        wrapped = textwrap.fill(f"Error: {paragraph}", width=100, break_on_hyphens=False, break_long_words=False)
        print(wrapped, file=sys.stderr)
        return error.exit_code
    return 0
