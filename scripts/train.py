#!/usr/bin/env python
"""Train SimpleNN on MNIST with Lightning: `python scripts/train.py --accelerator gpu --devices 1`.

`--help` lists every option; `--config configs/default.yaml` reads them from a file.
"""

import sys

try:  # Ctrl-C while torch and Lightning import (seconds): the shell's status, not the import machinery's traceback
    from mnist_lightning.core.train import main
except KeyboardInterrupt:
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
