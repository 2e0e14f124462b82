#!/usr/bin/env python
"""Test a checkpoint: `python scripts/evaluate.py --ckpt_path runs/<run>/checkpoints/last.ckpt`."""

import sys

try:  # Ctrl-C while torch and Lightning import (seconds): the shell's status, not the import machinery's traceback
    from mnist_lightning.core.evaluate import main
except KeyboardInterrupt:
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
