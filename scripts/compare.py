#!/usr/bin/env python
"""The three rungs side by side: `python scripts/compare.py --accelerator cpu` (plain PyTorch, Fabric, Trainer).

Prints each rung's per-epoch training loss, test accuracy, median epoch time and whole-process time (and their
ratios to plain PyTorch), peak memory, and the largest differences in final weights and losses between each
pair; writes them as compare.json. See src/mnist_lightning/compare.py.
"""

import sys

from mnist_lightning.errors import run_script

if __name__ == "__main__":
    sys.exit(run_script("mnist_lightning.compare"))
