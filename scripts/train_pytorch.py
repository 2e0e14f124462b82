#!/usr/bin/env python
"""The plain-PyTorch rung, devices by hand: `python scripts/train_pytorch.py --device cuda`.

Same model, data, split, defaults and seed as scripts/train.py; see src/mnist_lightning/plain_pytorch.py.
"""

import sys

from mnist_lightning.plain_pytorch import main

if __name__ == "__main__":
    sys.exit(main())
