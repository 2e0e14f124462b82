"""What each script of this folder runs: an entry point's ``main()``, or, from a Python that lacks the project (the
system's, with .venv not activated), how to get one that has it."""

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(module: str) -> int:
    try:
        from mnist_lightning.errors import run_script

        return run_script(module)
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
        return 1
