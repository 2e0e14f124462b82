#!/usr/bin/env python
"""Test a checkpoint: `python scripts/evaluate.py --ckpt_path runs/<run>/checkpoints/last.ckpt`."""

import sys

from mnist_lightning.core.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
