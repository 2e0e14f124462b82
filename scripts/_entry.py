"""What every script of this folder imports first, before the project, torch and Lightning.

Importing them is the slow part of start-up. A KeyboardInterrupt raised inside an import can be swallowed by a
library's broad ``except`` and leave a half-imported module that fails later with a misleading traceback; so while
they import, Ctrl-C or SIGTERM ends the process at once (nothing has been written yet) with the shell's status for
it. From a Python that lacks the project (the system's, with .venv not activated), the script says how to get one
that has it.
"""

import contextlib
import importlib
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def interrupted(signum: int, frame: object) -> None:
    print("\nInterrupted." if signum == signal.SIGINT else "\nStopped by SIGTERM.", file=sys.stderr, flush=True)
    os._exit(128 + signum)


@contextlib.contextmanager
def project_imports() -> Iterator[None]:
    # Not over a handler the caller chose (an ignored Ctrl-C, say).
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    ours = [signum for signum, default in defaults.items() if signal.getsignal(signum) is default]
    for signum in ours:
        signal.signal(signum, interrupted)
    try:
        yield
    except ModuleNotFoundError as error:  # the project, or a library it needs, is not installed in this Python
        venv = ROOT / ".venv" / "bin" / "python"
        command = shlex.join([str(venv if venv.exists() else "python"), *sys.argv])
        setup = "" if venv.exists() else 'Install it first (`make install`, or pip install -e ".[dev]" in a venv). '
        print(
            f"Error: this Python ({sys.executable}) cannot import {error.name}: the project is not installed in it. "
            f"{setup}Run the script with the project's environment: {command} (or `source .venv/bin/activate` "
            "first).",
            file=sys.stderr,
        )
        sys.exit(1)
    finally:
        for signum in ours:
            signal.signal(signum, defaults[signum])


def run(module: str) -> int:
    """Import the entry point's module, then call its ``main()``."""
    with project_imports():
        main = importlib.import_module(module).main
    return finished(main())


def finished(status: int) -> int:
    """The exit status of a command that has ended: a stop while Python shuts down (seconds, with torch loaded)
    would only turn it into a failure, and print nothing."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    return status
