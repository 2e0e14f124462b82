#!/usr/bin/env python
"""The Fabric rung, the plain loop with Fabric doing the device work: `python scripts/train_fabric.py --devices 1`.

Same model, data, split, defaults, seed and flags as scripts/train_pytorch.py; see src/mnist_lightning/train_fabric.py.
"""

import sys

from mnist_lightning.errors import run_script

if __name__ == "__main__":
    sys.exit(run_script("mnist_lightning.train_fabric"))
