#!/usr/bin/env python
"""Lightning template vs plain PyTorch, side by side: `python scripts/compare.py --accelerator cpu`.

Prints per-epoch training loss of both, test accuracy, median epoch time, the Lightning/plain ratio and
peak memory; `--json` prints it as JSON. See src/mnist_lightning/compare.py.
"""

import sys

from mnist_lightning.compare import main

if __name__ == "__main__":
    sys.exit(main())
