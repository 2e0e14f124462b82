#!/usr/bin/env python
"""Export a checkpoint's SimpleNN for serving without Lightning (.pt2, and ONNX with the onnx extra), with
preprocessing.json: every step from a picture to the model's input.

python scripts/export.py --ckpt_path runs/<run>/checkpoints/last.ckpt
"""

import sys

from mnist_lightning.core.export import main

if __name__ == "__main__":
    sys.exit(main())
