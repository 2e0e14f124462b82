#!/usr/bin/env python
"""Train SimpleNN on MNIST with Lightning: `python scripts/train.py --accelerator gpu --devices 1`.

`--help` lists every option; `--config configs/default.yaml` reads them from a file.
"""

import sys

from mnist_lightning.core.train import main

if __name__ == "__main__":
    sys.exit(main())
