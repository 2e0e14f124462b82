#!/usr/bin/env python
"""What PyTorch and Lightning see on this machine, and why a GPU is not used: `python scripts/devices.py`."""

import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("mnist_lightning.devices"))
