#!/usr/bin/env python
"""Test a checkpoint: `python scripts/evaluate.py --ckpt_path runs/<run>/checkpoints/last.ckpt`."""

import sys

from mnist_lightning.errors import run_script

if __name__ == "__main__":
    sys.exit(run_script("mnist_lightning.evaluate"))
