#!/usr/bin/env python
"""Test a checkpoint: `python scripts/evaluate.py --ckpt_path runs/<run>/checkpoints/last.ckpt`."""

import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("mnist_lightning.core.evaluate"))
