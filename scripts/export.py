#!/usr/bin/env python
"""Export a checkpoint's SimpleNN for serving without Lightning (.pt2, and ONNX with --formats pt2 onnx and the onnx
extra), with preprocessing.json: every step from a picture to the model's input.

python scripts/export.py --ckpt_path runs/<run>/checkpoints/last.ckpt
"""

import sys

try:  # Ctrl-C while torch and Lightning import (seconds): the shell's status, not the import machinery's traceback
    from mnist_lightning.core.export import main
except KeyboardInterrupt:
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
