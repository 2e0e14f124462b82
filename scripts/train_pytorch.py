#!/usr/bin/env python
"""The plain-PyTorch rung, devices by hand: `python scripts/train_pytorch.py --device cuda`.

Same model, data, split, defaults and seed as scripts/train.py; see src/mnist_lightning/plain_pytorch.py.
"""

import sys

from mnist_lightning.errors import run_script

if __name__ == "__main__":
    sys.exit(run_script("mnist_lightning.plain_pytorch"))
