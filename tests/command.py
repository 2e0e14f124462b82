"""``python tests/command.py train|evaluate|predict|export ARGS``: a command of the project, run as a user runs it,
with the tests' own task (conftest.py's ``task`` fixture) named in core/classes.py by the environment's TEST_MODEL and
TEST_DATA_MODULE. Lightning's DDP runs this same command line in the processes it starts."""

import os
import sys
from importlib import import_module

from mnist_lightning.core import classes

if __name__ == "__main__":
    classes.MODEL = os.environ.get("TEST_MODEL", classes.MODEL)
    classes.DATA_MODULE = os.environ.get("TEST_DATA_MODULE", classes.DATA_MODULE)
    # Lightning starts a DDP run's other processes with this process's sys.argv: they find the command where it was.
    command = os.environ.get("TEST_COMMAND") or sys.argv.pop(1)
    os.environ["TEST_COMMAND"] = command
    sys.exit(import_module(f"mnist_lightning.core.{command}").main())
