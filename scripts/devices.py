#!/usr/bin/env python
"""What PyTorch and Lightning see on this machine, and why a GPU is not used: `python scripts/devices.py`."""

import sys

from mnist_lightning.errors import run_script

if __name__ == "__main__":
    sys.exit(run_script("mnist_lightning.devices"))
